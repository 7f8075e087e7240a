"""Triton SiLU-and-mul: ``silu(gate) * up`` for the Llama-family MLP, gate and up side by side."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.validation import (
    FLOAT_DTYPES,
    check_dtype,
    check_last_dim_contiguous,
    check_launchable,
    check_ndim,
)

__all__ = ["silu_and_mul"]

_BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_row_stride, intermediate, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < intermediate
    gate = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_row_stride + intermediate + cols, mask=mask, other=0.0)
    # Round the activation before the product, as transformers' act_fn(gate) * up does.
    silu = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty)
    out = silu.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * intermediate + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [num_tokens, 2 * intermediate] -> [num_tokens, intermediate]. See the reference."""
    check_ndim("x", x, 2, "[num_tokens, 2 * intermediate]")
    check_dtype("x", x, FLOAT_DTYPES)
    if x.shape[1] % 2:
        raise ValueError(f"x.shape[1] must be even (gate and up halves); got {x.shape[1]}")
    check_last_dim_contiguous("x", x)
    check_launchable(x)
    num_tokens, intermediate = x.shape[0], x.shape[1] // 2
    out = torch.empty(num_tokens, intermediate, dtype=x.dtype, device=x.device)
    if num_tokens == 0:
        return out
    block = min(_BLOCK, 1 << max(0, (intermediate - 1).bit_length()))
    grid = (num_tokens, triton.cdiv(intermediate, block))
    _silu_and_mul_kernel[grid](x, out, x.stride(0), intermediate, BLOCK=block, num_warps=4)
    return out
