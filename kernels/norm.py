"""Triton RMSNorm, plain and with the residual add fused in: one program normalises one row."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.validation import (
    FLOAT_DTYPES,
    check_dim,
    check_dtype,
    check_last_dim_contiguous,
    check_launchable,
    check_ndim,
    check_same_device,
    check_same_dtype,
    next_power_of_two,
)

__all__ = ["fused_add_rms_norm", "rms_norm"]


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    residual_out_ptr,
    x_row_stride,
    residual_row_stride,
    hidden,
    eps,
    ADD_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
    if ADD_RESIDUAL:
        residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0)
        # Round the sum to the activation dtype, as the unfused model does between layers.
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * hidden + cols, x, mask=mask)
    x = x.to(tl.float32)
    variance = tl.sum(x * x, axis=0) / hidden
    normed = (x * tl.rsqrt(variance + eps)).to(out_ptr.dtype.element_ty)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    # Both factors fit float32 exactly, so one rounding matches a native half-precision product.
    out = normed.to(tl.float32) * weight.to(tl.float32)
    tl.store(out_ptr + row * hidden + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _check_args(x, weight, residual=None) -> None:
    check_ndim("x", x, 2, "[num_rows, hidden]")
    check_ndim("weight", weight, 1, "[hidden]")
    check_dtype("x", x, FLOAT_DTYPES)
    check_same_dtype(["x", "weight"], [x, weight])
    check_dim("weight", weight, 0, x.shape[1], "hidden")
    check_last_dim_contiguous("x", x)
    check_last_dim_contiguous("weight", weight)
    if residual is not None:
        check_ndim("residual", residual, 2, "[num_rows, hidden]")
        check_same_dtype(["x", "residual"], [x, residual])
        if residual.shape != x.shape:
            raise ValueError(
                f"residual must have x's shape {tuple(x.shape)}; got {tuple(residual.shape)}"
            )
        check_last_dim_contiguous("residual", residual)
        check_same_device(["x", "residual", "weight"], [x, residual, weight])
    else:
        check_same_device(["x", "weight"], [x, weight])


def _launch(x, residual, weight, eps, out, residual_out) -> None:
    num_rows, hidden = x.shape
    if num_rows == 0:
        return
    block = next_power_of_two(hidden)
    num_warps = 8 if block >= 4096 else 4 if block >= 1024 else 1
    _rms_norm_kernel[(num_rows,)](
        x,
        residual if residual is not None else x,
        weight,
        out,
        residual_out if residual_out is not None else out,
        x.stride(0),
        residual.stride(0) if residual is not None else 0,
        hidden,
        eps,
        ADD_RESIDUAL=residual is not None,
        BLOCK=block,
        num_warps=num_warps,
    )


def rms_norm(
    x: torch.Tensor,  # [num_rows, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
) -> torch.Tensor:  # [num_rows, hidden]
    """RMSNorm of each row. See kernels.reference.norm.rms_norm."""
    _check_args(x, weight)
    check_launchable(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(x, None, weight, eps, out, None)
    return out


def fused_add_rms_norm(
    x: torch.Tensor,  # [num_rows, hidden]
    residual: torch.Tensor,  # [num_rows, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # ([num_rows, hidden], [num_rows, hidden])
    """``(rms_norm(x + residual), x + residual)`` in one pass over memory."""
    _check_args(x, weight, residual)
    check_launchable(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(x, residual, weight, eps, out, residual_out)
    return out, residual_out
