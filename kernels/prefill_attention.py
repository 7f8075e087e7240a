"""Triton attention for prefill chunks over the paged KV cache (prefix-cached and chunked).

The chunk's own K and V are already in the cache (``reshape_and_cache`` runs first), so a
sequence's queries are its last ``q_len`` positions and attend to all ``seq_len`` cached tokens,
causally: query j of the chunk sits at position ``seq_len - q_len + j``. A cached prefix, an
earlier chunk and the chunk itself are one loop over the block table. Decodes (q_len 1) work
too, but the decode kernel is faster for them.

Grid: (sequence, query tile, query head); tiles past a sequence's query length do no work.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.attention_checks import check_paged_attention_args
from kernels.availability import interpreting
from kernels.validation import (
    check_contiguous,
    check_dim,
    check_dtype,
    check_launchable,
    check_ndim,
    dot_precision,
    next_power_of_two,
)

__all__ = ["paged_prefill_attention"]

_LOG2E = 1.4426950408889634


@triton.jit
def _prefill_kernel(
    query_ptr,
    key_cache_ptr,
    value_cache_ptr,
    block_tables_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    out_ptr,
    qk_scale,
    query_stride_token,
    query_stride_head,
    block_tables_stride,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    query_start = tl.load(query_start_loc_ptr + seq)
    query_len = tl.load(query_start_loc_ptr + seq + 1) - query_start
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - query_len  # tokens cached before this chunk

    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < query_len
    positions = context_len + rows  # [BLOCK_M] absolute position of each query
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < HEAD_DIM
    tokens_of_rows = (query_start + rows).to(tl.int64)
    # [BLOCK_M, BLOCK_DIM]
    q = tl.load(
        query_ptr
        + tokens_of_rows[:, None] * query_stride_token
        + head * query_stride_head
        + dims[None, :],
        mask=row_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )

    # Keys past the tile's last query are masked for every row: stop there. Tiles past the
    # sequence's queries get an empty loop.
    kv_end = tl.minimum(seq_len, context_len + (tile + 1) * BLOCK_M)
    kv_end = tl.where(tile * BLOCK_M < query_len, kv_end, 0)
    running_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DIM], dtype=tl.float32)
    cache_row = NUM_KV_HEADS * HEAD_DIM
    for tile_start in range(0, kv_end, BLOCK_N):
        tokens = tile_start + tl.arange(0, BLOCK_N)
        token_mask = tokens < kv_end
        block_ids = tl.load(
            block_tables_ptr + seq * block_tables_stride + tokens // BLOCK_SIZE,
            mask=token_mask,
            other=0,
        ).to(tl.int64)
        kv_rows = (block_ids * BLOCK_SIZE + tokens % BLOCK_SIZE) * cache_row + kv_head * HEAD_DIM
        kv_mask = token_mask[:, None] & dim_mask[None, :]
        k = tl.load(key_cache_ptr + kv_rows[:, None] + dims[None, :], mask=kv_mask, other=0.0)
        v = tl.load(value_cache_ptr + kv_rows[:, None] + dims[None, :], mask=kv_mask, other=0.0)
        # [BLOCK_M, BLOCK_N] in log2 units
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        visible = token_mask[None, :] & (tokens[None, :] <= positions[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        # Token 0 is visible to every row, so the first tile makes every running max finite.
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        probs = tl.exp2(scores - new_max[:, None])
        correction = tl.exp2(running_max - new_max)
        running_sum = running_sum * correction + tl.sum(probs, axis=1)
        acc = acc * correction[:, None] + tl.dot(
            probs.to(v.dtype), v, input_precision=DOT_PRECISION
        )
        running_max = new_max

    out = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    out_rows = (tokens_of_rows * NUM_HEADS + head) * HEAD_DIM
    tl.store(
        out_ptr + out_rows[:, None] + dims[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_mask[:, None] & dim_mask[None, :],
    )


def _tiles(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps). Chosen so that ptxas reports no register spills for
    sm_90 (tests/kernels/hopper_compile.py); not yet tuned by timing on a GPU."""
    if interpreting():
        return 16, 16, 4  # small tiles keep the CPU interpreter's numpy arrays small
    if dtype == torch.float32:
        return 32, 32, 4  # float32 tiles take twice the registers; larger ones spill
    if head_dim <= 64:
        return 64, 64, 4
    return 64, 64, 8


def paged_prefill_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], sequences back to back
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32, cumsum of query lengths from 0
    seq_lens: torch.Tensor,  # [num_seqs] int32, context length incl. the chunk
    scale: float,
    max_query_len: int,  # host-side upper bound on query lengths: sizes the grid
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Causal chunk attention over the paged cache. See kernels.reference.attention."""
    check_paged_attention_args(query, key_cache, value_cache, block_tables, seq_lens, scale)
    check_ndim("query_start_loc", query_start_loc, 1, "[num_seqs + 1]")
    check_dtype("query_start_loc", query_start_loc, (torch.int32,))
    check_dim("query_start_loc", query_start_loc, 0, seq_lens.shape[0] + 1, "num_seqs + 1")
    check_contiguous("query_start_loc", query_start_loc)
    if query_start_loc.device != query.device:
        raise ValueError(f"query_start_loc must be on {query.device}; got {query_start_loc.device}")
    if max_query_len <= 0 and query.shape[0] > 0:
        raise ValueError(f"max_query_len must be positive; got {max_query_len}")
    check_launchable(query)
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return out
    block_m, block_n, num_warps = _tiles(head_dim, query.dtype)
    grid = (num_seqs, triton.cdiv(max_query_len, block_m), num_heads)
    _prefill_kernel[grid](
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start_loc,
        seq_lens,
        out,
        scale * _LOG2E,
        query.stride(0),
        query.stride(1),
        block_tables.stride(0),
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        GROUP_SIZE=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_DIM=max(16, next_power_of_two(head_dim)),
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        DOT_PRECISION=dot_precision(query.dtype),
        **({} if interpreting() else {"num_warps": num_warps, "num_stages": 2}),
    )
    return out
