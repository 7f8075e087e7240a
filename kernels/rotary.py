"""Triton rotary embedding (neox / HF ``rotate_half`` style): one program rotates one token.

The cos/sin cache comes from ``kernels.reference.rotary.rotary_cos_sin_cache`` (Llama 3
scaling included), built once per model; the kernel only looks rows up by position.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.reference.rotary import rotary_cos_sin_cache
from kernels.validation import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_contiguous,
    check_dim,
    check_dtype,
    check_last_dim_contiguous,
    check_launchable,
    check_ndim,
    check_same_device,
    check_same_dtype,
    next_power_of_two,
)

__all__ = ["apply_rotary_embedding", "rotary_cos_sin_cache"]


@triton.jit
def _rotate_heads(
    x_ptr,
    out_ptr,
    token,
    x_stride_token,
    x_stride_head,
    cos,
    sin,
    num_heads,
    HALF: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_HEADS)
    dims = tl.arange(0, BLOCK_HALF)
    mask = (heads[:, None] < num_heads) & (dims[None, :] < HALF)
    x_row = x_ptr + token * x_stride_token + heads[:, None] * x_stride_head + dims[None, :]
    x1 = tl.load(x_row, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + HALF, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    # Round each product like transformers' q * cos + rotate_half(q) * sin in the model dtype.
    x1_cos = (x1 * cos).to(dtype).to(tl.float32)
    x2_sin = (x2 * sin).to(dtype).to(tl.float32)
    x2_cos = (x2 * cos).to(dtype).to(tl.float32)
    x1_sin = (x1 * sin).to(dtype).to(tl.float32)
    out_row = out_ptr + token * num_heads * (2 * HALF) + heads[:, None] * (2 * HALF) + dims[None, :]
    tl.store(out_row, (x1_cos - x2_sin).to(dtype), mask=mask)
    tl.store(out_row + HALF, (x2_cos + x1_sin).to(dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    positions_ptr,
    query_ptr,
    key_ptr,
    cache_ptr,
    query_out_ptr,
    key_out_ptr,
    query_stride_token,
    query_stride_head,
    key_stride_token,
    key_stride_head,
    num_heads,
    num_kv_heads,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_KV_HEADS: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    dims = tl.arange(0, BLOCK_HALF)
    dim_mask = dims < HALF
    cache_row = cache_ptr + position * (2 * HALF)
    dtype = query_out_ptr.dtype.element_ty
    # cos and sin are rounded to the model dtype first, as transformers does.
    cos = tl.load(cache_row + dims, mask=dim_mask, other=0.0).to(dtype).to(tl.float32)[None, :]
    sin = (
        tl.load(cache_row + HALF + dims, mask=dim_mask, other=0.0).to(dtype).to(tl.float32)[None, :]
    )
    _rotate_heads(
        query_ptr,
        query_out_ptr,
        token,
        query_stride_token,
        query_stride_head,
        cos,
        sin,
        num_heads,
        HALF,
        BLOCK_HEADS,
        BLOCK_HALF,
    )
    _rotate_heads(
        key_ptr,
        key_out_ptr,
        token,
        key_stride_token,
        key_stride_head,
        cos,
        sin,
        num_kv_heads,
        HALF,
        BLOCK_KV_HEADS,
        BLOCK_HALF,
    )


def _check_args(positions, query, key, cos_sin_cache) -> None:
    check_ndim("positions", positions, 1, "[num_tokens]")
    check_ndim("query", query, 3, "[num_tokens, num_heads, head_dim]")
    check_ndim("key", key, 3, "[num_tokens, num_kv_heads, head_dim]")
    check_ndim("cos_sin_cache", cos_sin_cache, 2, "[max_position, head_dim]")
    check_dtype("positions", positions, INDEX_DTYPES)
    check_dtype("query", query, FLOAT_DTYPES)
    check_same_dtype(["query", "key"], [query, key])
    check_dtype("cos_sin_cache", cos_sin_cache, (torch.float32,))
    num_tokens, _, head_dim = query.shape
    check_dim("key", key, 0, num_tokens, "num_tokens")
    check_dim("positions", positions, 0, num_tokens, "num_tokens")
    check_dim("key", key, 2, head_dim, "head_dim")
    check_dim("cos_sin_cache", cos_sin_cache, 1, head_dim, "head_dim (rotary over the full head)")
    if head_dim % 2:
        raise ValueError(f"head_dim must be even; got {head_dim}")
    check_last_dim_contiguous("query", query)
    check_last_dim_contiguous("key", key)
    check_contiguous("positions", positions)
    check_contiguous("cos_sin_cache", cos_sin_cache)
    check_same_device(
        ["positions", "query", "key", "cos_sin_cache"], [positions, query, key, cos_sin_cache]
    )


def apply_rotary_embedding(
    positions: torch.Tensor,  # [num_tokens] int
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    cos_sin_cache: torch.Tensor,  # [max_position, head_dim] float32: cos half | sin half
) -> tuple[torch.Tensor, torch.Tensor]:  # new query and key, contiguous
    """Rotate query and key by position. Positions past the cache are not checked (no sync)."""
    _check_args(positions, query, key, cos_sin_cache)
    check_launchable(query)
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key.shape[1]
    query_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    key_out = torch.empty(key.shape, dtype=key.dtype, device=key.device)
    if num_tokens == 0:
        return query_out, key_out
    half = head_dim // 2
    _rotary_kernel[(num_tokens,)](
        positions,
        query,
        key,
        cos_sin_cache,
        query_out,
        key_out,
        query.stride(0),
        query.stride(1),
        key.stride(0),
        key.stride(1),
        num_heads,
        num_kv_heads,
        HALF=half,
        BLOCK_HALF=next_power_of_two(half),
        BLOCK_HEADS=next_power_of_two(num_heads),
        BLOCK_KV_HEADS=next_power_of_two(num_kv_heads),
        num_warps=4,
    )
    return query_out, key_out
