"""Host values to the device without stalling the host.

``torch.tensor(values, device="cuda")`` and ``.to("cuda")`` of ordinary host memory wait for
everything queued on the stream before they return, so a step's inputs built that way wait
for the step before it to finish: the host and the GPU take turns. From page-locked memory
the copy is queued like a kernel and the call returns at once, which lets the next step be
built while the GPU computes this one (engine/async_steps.py). PyTorch's pinned-memory cache
keeps each buffer until its copy has run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def to_device(
    values: Sequence | np.ndarray, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``values`` as a tensor on ``device``; on a GPU, copied without waiting for it."""
    if isinstance(values, np.ndarray):
        host = torch.from_numpy(values).to(dtype)
    else:
        host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host if device.type == "cpu" else host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
