"""Backend selection in one place."""

from __future__ import annotations

import torch

from engine.attention.backend import AttentionBackend


def get_attention_backend(device: torch.device | str, name: str = "auto") -> AttentionBackend:
    """The attention implementation for ``device``.

    Only the PyTorch backend exists so far; it runs on CPU and CUDA. A Triton backend built on
    kernels/ will be chosen here for CUDA when ``name`` is "auto".
    """
    if name not in ("auto", "torch"):
        raise ValueError(f"unknown attention backend {name!r}; choose 'auto' or 'torch'")
    from engine.attention.torch_backend import TorchAttentionBackend

    return TorchAttentionBackend()
