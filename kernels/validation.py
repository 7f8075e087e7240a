"""Argument checks shared by the kernel wrappers: each failure is a ValueError naming the argument.

A Triton kernel reads raw pointers with the strides it is given; a wrong dtype, shape or layout
does not fail, it reads garbage. The wrappers therefore check everything before launch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from kernels.availability import interpreting, triton_unavailable_reason

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def check_dtype(name: str, tensor: torch.Tensor, allowed: Iterable[torch.dtype]) -> None:
    allowed = tuple(allowed)
    if tensor.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise ValueError(
            f"{name} must have dtype {names}; got {str(tensor.dtype).removeprefix('torch.')}"
        )


def check_same_dtype(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        found = ", ".join(
            f"{n}={str(t.dtype).removeprefix('torch.')}"
            for n, t in zip(names, tensors, strict=True)
        )
        raise ValueError(f"{', '.join(names)} must share one dtype; got {found}")


def check_ndim(name: str, tensor: torch.Tensor, ndim: int, layout: str) -> None:
    if tensor.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D {layout}; got shape {tuple(tensor.shape)}")


def check_dim(name: str, tensor: torch.Tensor, dim: int, expected: int, what: str) -> None:
    if tensor.shape[dim] != expected:
        raise ValueError(
            f"{name}.shape[{dim}] ({what}) must be {expected}; got {tensor.shape[dim]} "
            f"(shape {tuple(tensor.shape)})"
        )


def check_contiguous(name: str, tensor: torch.Tensor) -> None:
    if not tensor.is_contiguous():
        raise ValueError(
            f"{name} must be contiguous; got strides {tensor.stride()} for shape "
            f"{tuple(tensor.shape)}"
        )


def check_last_dim_contiguous(name: str, tensor: torch.Tensor) -> None:
    if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(
            f"{name} must have a unit stride in its last dimension; got strides {tensor.stride()}"
        )


def check_power_of_two(name: str, value: int) -> None:
    if value <= 0 or value & (value - 1):
        raise ValueError(f"{name} must be a positive power of two; got {value}")


def check_same_device(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        found = ", ".join(f"{n}={t.device}" for n, t in zip(names, tensors, strict=True))
        raise ValueError(f"{', '.join(names)} must be on one device; got {found}")


def check_launchable(tensor: torch.Tensor) -> None:
    """Raise a clear error when Triton cannot run on the tensor's device in this process."""
    reason = triton_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"Triton kernels cannot run here: {reason}")
    if tensor.device.type == "cpu" and not interpreting():
        raise ValueError("CPU tensors need TRITON_INTERPRET=1; use kernels.reference on CPU")
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError(f"Triton kernels run on CUDA tensors; got device {tensor.device}")


def next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot's input_precision: exact IEEE products for float32 inputs, so a float32 model
    matches transformers token for token; "tf32" is Triton's default and only changes fp32."""
    return "ieee" if dtype == torch.float32 else "tf32"
