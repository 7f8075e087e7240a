"""Triton paged-attention decode: one query token per sequence over its paged KV context.

Grid: (sequence, KV head, partition). One program serves every query head of a KV head's group
(GQA), so each K and V tile is read from memory once for the whole group. Long contexts split
into partitions of ``partition_size`` tokens that run in parallel; each writes its normalised
output with its running max and sum, and a reduce kernel merges them (flash-decoding). With a
single partition the first kernel writes the final output and the reduce is skipped.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.attention_checks import check_paged_attention_args
from kernels.availability import interpreting
from kernels.validation import (
    check_launchable,
    check_power_of_two,
    dot_precision,
    next_power_of_two,
)

__all__ = ["decode_partitioning", "paged_decode_attention"]

_LOG2E = 1.4426950408889634


@triton.jit
def _decode_partition_kernel(
    query_ptr,
    key_cache_ptr,
    value_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    partial_out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    qk_scale,
    query_stride_seq,
    query_stride_head,
    block_tables_stride,
    max_num_partitions,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    BLOCK_GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_TOKENS: tl.constexpr,
    PARTITION_SIZE: tl.constexpr,
    SINGLE_PARTITION: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    partition = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = partition * PARTITION_SIZE
    if start >= seq_len:
        # Past the context (the grid covers max_seq_len, under a CUDA graph the model's whole
        # length): the reduce reads no partition past cdiv(seq_len, PARTITION_SIZE).
        return
    end = tl.minimum(start + PARTITION_SIZE, seq_len)

    group = tl.arange(0, BLOCK_GROUP)
    heads = kv_head * GROUP_SIZE + group
    head_mask = group < GROUP_SIZE
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < HEAD_DIM
    # [BLOCK_GROUP, BLOCK_DIM]: every query head that shares this KV head
    q = tl.load(
        query_ptr + seq * query_stride_seq + heads[:, None] * query_stride_head + dims[None, :],
        mask=head_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )

    running_max = tl.full([BLOCK_GROUP], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_GROUP], dtype=tl.float32)
    acc = tl.zeros([BLOCK_GROUP, BLOCK_DIM], dtype=tl.float32)
    cache_row = NUM_KV_HEADS * HEAD_DIM
    for tile_start in range(start, end, TILE_TOKENS):
        tokens = tile_start + tl.arange(0, TILE_TOKENS)
        token_mask = tokens < end
        block_ids = tl.load(
            block_tables_ptr + seq * block_tables_stride + tokens // BLOCK_SIZE,
            mask=token_mask,
            other=0,
        ).to(tl.int64)
        # [TILE_TOKENS]: offset of each token's row for this KV head in the contiguous cache
        rows = (block_ids * BLOCK_SIZE + tokens % BLOCK_SIZE) * cache_row + kv_head * HEAD_DIM
        kv_mask = token_mask[:, None] & dim_mask[None, :]
        k = tl.load(key_cache_ptr + rows[:, None] + dims[None, :], mask=kv_mask, other=0.0)
        v = tl.load(value_cache_ptr + rows[:, None] + dims[None, :], mask=kv_mask, other=0.0)
        # [BLOCK_GROUP, TILE_TOKENS] scores in log2 units, so exp2 replaces exp
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        scores = tl.where(token_mask[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        probs = tl.exp2(scores - new_max[:, None])
        correction = tl.exp2(running_max - new_max)
        running_sum = running_sum * correction + tl.sum(probs, axis=1)
        acc = acc * correction[:, None] + tl.dot(
            probs.to(v.dtype), v, input_precision=DOT_PRECISION
        )
        running_max = new_max

    out = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    out_mask = head_mask[:, None] & dim_mask[None, :]
    if SINGLE_PARTITION:
        out_rows = (seq * NUM_HEADS + heads) * HEAD_DIM
        tl.store(
            out_ptr + out_rows[:, None] + dims[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )
    else:
        # partial_*: [num_seqs, num_heads, max_num_partitions(, head_dim)], float32
        stat_rows = (seq * NUM_HEADS + heads) * max_num_partitions + partition
        tl.store(
            partial_out_ptr + stat_rows[:, None] * HEAD_DIM + dims[None, :], out, mask=out_mask
        )
        tl.store(partial_max_ptr + stat_rows, running_max, mask=head_mask)
        tl.store(partial_sum_ptr + stat_rows, running_sum, mask=head_mask)


@triton.jit
def _decode_reduce_kernel(
    seq_lens_ptr,
    partial_out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    out_ptr,
    max_num_partitions,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_DIM: tl.constexpr,
    PARTITION_SIZE: tl.constexpr,
    BLOCK_PARTITIONS: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    num_partitions = tl.cdiv(seq_len, PARTITION_SIZE)
    partitions = tl.arange(0, BLOCK_PARTITIONS)
    partition_mask = partitions < num_partitions
    stat_rows = (seq * NUM_HEADS + head) * max_num_partitions + partitions
    maxes = tl.load(partial_max_ptr + stat_rows, mask=partition_mask, other=float("-inf"))
    sums = tl.load(partial_sum_ptr + stat_rows, mask=partition_mask, other=0.0)
    global_max = tl.max(maxes, axis=0)
    # Each partition's output is already normalised by its own sum: weight it by its share.
    weights = tl.where(partition_mask, tl.exp2(maxes - global_max) * sums, 0.0)
    total = tl.sum(weights, axis=0)
    dims = tl.arange(0, BLOCK_DIM)
    dim_mask = dims < HEAD_DIM
    partials = tl.load(
        partial_out_ptr + stat_rows[:, None] * HEAD_DIM + dims[None, :],
        mask=partition_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )
    out = tl.sum(partials * weights[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + (seq * NUM_HEADS + head) * HEAD_DIM + dims,
        out.to(out_ptr.dtype.element_ty),
        mask=dim_mask,
    )


# A program per (sequence, KV head) is enough work for the GPU at this many programs per
# multiprocessor: splitting contexts then only adds the partials' writes and the reduce. The
# sweep of bench/kernels.py on an H200 (132 multiprocessors, docs/kernels.md): one partition
# read 91% of copy bandwidth at batch 64 x 8 KV heads (3.9 programs per multiprocessor) and
# context 2048, where partitions of 512 read 83%.
SINGLE_PARTITION_PROGRAMS_PER_SM = 3
# At or below this share of a program per multiprocessor, partitions of 256 tokens (twice as
# many programs as 512) keep more of them busy: one sequence of 8,192 tokens decoded in
# 24-37 us there against 53-63 us with 512.
SMALL_PARTITION_PROGRAMS_PER_SM = 1 / 8
DEFAULT_PARTITION_SIZE = 512
# "One partition" is one of this many tokens, so that one compiled variant serves every
# context up to it. ptxas spills registers on sm_90 from 65,536 up (the loop's bound is
# start + PARTITION_SIZE; tests/kernels/test_compile_for_hopper.py); longer contexts split.
WHOLE_CONTEXT_PARTITION = 32768
# What a device without multiprocessors to count (the CPU under TRITON_INTERPRET=1) is taken
# to have, so an interpreted run makes the choice an H100 or H200 would for the same shapes.
HOPPER_SM_COUNT = 132


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return HOPPER_SM_COUNT
    return torch.cuda.get_device_properties(device).multi_processor_count


def decode_partitioning(num_seqs: int, num_kv_heads: int, device: torch.device) -> int:
    """The partition size for a decode batch when the caller names none.

    With programs enough per multiprocessor, one partition per (sequence, KV head) reads the
    whole context (up to WHOLE_CONTEXT_PARTITION tokens) and no reduce runs, however large the
    bound ``max_seq_len`` (a captured CUDA graph's is the model's whole length). With fewer,
    contexts split so that more programs share the work. Three sizes in all, so Triton compiles
    no new variant as contexts grow."""
    programs_per_sm = num_seqs * num_kv_heads / _sm_count(device)
    if programs_per_sm >= SINGLE_PARTITION_PROGRAMS_PER_SM:
        return WHOLE_CONTEXT_PARTITION
    if programs_per_sm <= SMALL_PARTITION_PROGRAMS_PER_SM:
        return 256
    return DEFAULT_PARTITION_SIZE


def _tile_tokens(partition_size: int, dtype: torch.dtype) -> int:
    """Tokens per loop iteration. 64 keeps enough bytes in flight for 16-bit caches without
    register spills on sm_90 (4 warps); float32 spills there, so it takes 32 tokens and 8
    warps. bench/kernels.py sweeps the alternatives on a GPU."""
    return min(32 if dtype == torch.float32 else 64, partition_size)


def paged_decode_attention(
    query: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32, context length incl. the new token
    scale: float,
    max_seq_len: int,  # host-side upper bound on seq_lens: sizes the grid without a sync
    partition_size: int | None = None,
) -> torch.Tensor:  # [num_seqs, num_heads, head_dim]
    """Decode attention over the paged cache. See kernels.reference.attention.

    ``partition_size`` None: chosen by ``decode_partitioning`` from the batch's shape and the
    device; a number splits every context longer than it into partitions of that size."""
    check_paged_attention_args(query, key_cache, value_cache, block_tables, seq_lens, scale)
    if query.shape[0] != seq_lens.shape[0]:
        raise ValueError(
            f"query has {query.shape[0]} sequences but seq_lens has {seq_lens.shape[0]}"
        )
    if max_seq_len <= 0:
        raise ValueError(f"max_seq_len must be positive; got {max_seq_len}")
    if partition_size is None:
        partition_size = decode_partitioning(query.shape[0], key_cache.shape[2], query.device)
    check_power_of_two("partition_size", partition_size)
    if partition_size < 16:
        raise ValueError(f"partition_size must be at least 16; got {partition_size}")
    check_launchable(query)
    return _launch(
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        scale,
        max_seq_len,
        partition_size,
        tile_tokens=_tile_tokens(partition_size, query.dtype),
        num_warps=8 if query.dtype == torch.float32 else 4,
    )


def _launch(
    query,
    key_cache,
    value_cache,
    block_tables,
    seq_lens,
    scale,
    max_seq_len,
    partition_size,
    *,
    tile_tokens: int,
    num_warps: int,
    num_stages: int = 2,
) -> torch.Tensor:
    """Launch with an explicit tiling; bench/kernels.py calls this to compare configurations."""
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    group_size = num_heads // num_kv_heads
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    if num_seqs == 0:
        return out
    max_num_partitions = triton.cdiv(max_seq_len, partition_size)
    single = max_num_partitions == 1
    if single:
        partial_out = partial_max = partial_sum = out  # unused by the single-partition path
    else:
        partial_max = torch.empty(
            num_seqs, num_heads, max_num_partitions, dtype=torch.float32, device=query.device
        )
        partial_sum = torch.empty_like(partial_max)
        partial_out = torch.empty(
            num_seqs,
            num_heads,
            max_num_partitions,
            head_dim,
            dtype=torch.float32,
            device=query.device,
        )
    block_dim = next_power_of_two(head_dim)
    launch_options = {} if interpreting() else {"num_warps": num_warps, "num_stages": num_stages}
    _decode_partition_kernel[(num_seqs, num_kv_heads, max_num_partitions)](
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        out,
        partial_out,
        partial_max,
        partial_sum,
        scale * _LOG2E,
        query.stride(0),
        query.stride(1),
        block_tables.stride(0),
        max_num_partitions,
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        GROUP_SIZE=group_size,
        # tl.dot needs at least 16 rows; padding rows hold zero queries and are not stored.
        BLOCK_GROUP=max(16, next_power_of_two(group_size)),
        HEAD_DIM=head_dim,
        BLOCK_DIM=max(16, block_dim),
        BLOCK_SIZE=block_size,
        TILE_TOKENS=tile_tokens,
        PARTITION_SIZE=partition_size,
        SINGLE_PARTITION=single,
        DOT_PRECISION=dot_precision(query.dtype),
        **launch_options,
    )
    if not single:
        _decode_reduce_kernel[(num_seqs, num_heads)](
            seq_lens,
            partial_out,
            partial_max,
            partial_sum,
            out,
            max_num_partitions,
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            BLOCK_DIM=block_dim,
            PARTITION_SIZE=partition_size,
            BLOCK_PARTITIONS=next_power_of_two(max_num_partitions),
            **({} if interpreting() else {"num_warps": 4}),
        )
    return out
