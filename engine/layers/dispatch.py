"""Which implementation the layer functions run: Triton kernels on CUDA, the native CPU ops
(kernels/cpu) for float32 and bfloat16 on a CPU, PyTorch otherwise.

The layer functions (rms_norm, add_rms_norm, silu_and_mul, RotaryEmbedding) keep their
signatures and pick per call from the tensor's device and dtype, so the model code never
branches.
"""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

import torch

from kernels.cpu import native_ops

# Device types whose tensors go through kernels/. Tests add "cpu" in a process started with
# TRITON_INTERPRET=1 to run the kernel path through Triton's interpreter.
KERNEL_DEVICE_TYPES: tuple[str, ...] = ("cuda",)


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_kernels(x: torch.Tensor) -> bool:
    """True when ``x`` should go through the Triton kernels rather than plain PyTorch."""
    return x.device.type in KERNEL_DEVICE_TYPES and _triton_installed()


# The dtypes the native CPU ops take (they compute in float32 and round as PyTorch does).
CPU_OP_DTYPES = (torch.float32, torch.bfloat16)


def cpu_ops(x: torch.Tensor):
    """``torch.ops.platform_cpu`` when ``x`` is a float32 or bfloat16 CPU tensor and the native
    ops are built (kernels/cpu), else None. Never on devices routed to Triton (the interpreter
    tests). The ops want their other tensor arguments in ``x``'s dtype."""
    if x.device.type != "cpu" or x.dtype not in CPU_OP_DTYPES or "cpu" in KERNEL_DEVICE_TYPES:
        return None
    return native_ops()


def kernel_ops() -> ModuleType:
    """The kernels package (its Triton modules load on first attribute access)."""
    import kernels

    return kernels
