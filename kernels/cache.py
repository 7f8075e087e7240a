"""Triton KV-cache write: one program per token copies its K and V rows to their cache slot."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.validation import (
    FLOAT_DTYPES,
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

__all__ = ["reshape_and_cache"]


@triton.jit
def _reshape_and_cache_kernel(
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_mapping_ptr,
    key_stride_token,
    key_stride_head,
    value_stride_token,
    value_stride_head,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_DIM: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    heads = tl.arange(0, BLOCK_HEADS)
    dims = tl.arange(0, BLOCK_DIM)
    # Padding tokens carry a negative slot and are masked out rather than skipped by a branch
    # (the slot is broadcast to the tile first: the interpreter rejects a scalar in a mask).
    slot_tile = tl.zeros([BLOCK_HEADS, BLOCK_DIM], dtype=tl.int64) + slot
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM) & (slot_tile >= 0)
    # The cache is contiguous: a slot is one [num_kv_heads, head_dim] row.
    cache_offsets = slot * (NUM_KV_HEADS * HEAD_DIM) + heads[:, None] * HEAD_DIM + dims[None, :]
    key = tl.load(
        key_ptr + token * key_stride_token + heads[:, None] * key_stride_head + dims[None, :],
        mask=mask,
    )
    tl.store(key_cache_ptr + cache_offsets, key, mask=mask)
    value = tl.load(
        value_ptr + token * value_stride_token + heads[:, None] * value_stride_head + dims[None, :],
        mask=mask,
    )
    tl.store(value_cache_ptr + cache_offsets, value, mask=mask)


def _check_args(key, value, key_cache, value_cache, slot_mapping) -> None:
    check_ndim("key", key, 3, "[num_tokens, num_kv_heads, head_dim]")
    check_ndim("value", value, 3, "[num_tokens, num_kv_heads, head_dim]")
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    check_ndim("key_cache", key_cache, 4, layout)
    check_ndim("value_cache", value_cache, 4, layout)
    check_ndim("slot_mapping", slot_mapping, 1, "[num_tokens]")
    check_dtype("key", key, FLOAT_DTYPES)
    check_same_dtype(
        ["key", "value", "key_cache", "value_cache"], [key, value, key_cache, value_cache]
    )
    check_dtype("slot_mapping", slot_mapping, (torch.int64, torch.int32))
    if key_cache.shape != value_cache.shape:
        raise ValueError(
            f"key_cache and value_cache must have one shape; got {tuple(key_cache.shape)} "
            f"and {tuple(value_cache.shape)}"
        )
    num_tokens = key.shape[0]
    for name, tensor in (("value", value),):
        check_dim(name, tensor, 0, num_tokens, "num_tokens")
    check_dim("slot_mapping", slot_mapping, 0, num_tokens, "num_tokens")
    for name, tensor in (("key", key), ("value", value)):
        check_dim(name, tensor, 1, key_cache.shape[2], "num_kv_heads")
        check_dim(name, tensor, 2, key_cache.shape[3], "head_dim")
        check_last_dim_contiguous(name, tensor)
    check_contiguous("key_cache", key_cache)
    check_contiguous("value_cache", value_cache)
    check_contiguous("slot_mapping", slot_mapping)
    check_same_device(
        ["key", "value", "key_cache", "value_cache", "slot_mapping"],
        [key, value, key_cache, value_cache, slot_mapping],
    )


def reshape_and_cache(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int64, negative = padding, not written
) -> None:
    """Write each token's K and V into its cache slot, in place. See kernels.reference.cache."""
    _check_args(key, value, key_cache, value_cache, slot_mapping)
    check_launchable(key)
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    _reshape_and_cache_kernel[(num_tokens,)](
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_HEADS=next_power_of_two(num_kv_heads),
        BLOCK_DIM=next_power_of_two(head_dim),
    )
