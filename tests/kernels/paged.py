"""Builders for paged KV caches with scattered blocks, shared by the attention tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PagedBatch:
    key_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor  # [num_seqs] int32


def make_paged_batch(
    seq_lens: list[int],
    *,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str,
    spare_blocks: int = 3,
) -> PagedBatch:
    """Random K/V in blocks shuffled across the cache, as a long-running block pool leaves them.

    Table entries past a sequence's last block point at real blocks of other sequences, so a
    kernel that reads past seq_len picks up wrong values instead of a lucky zero.
    """
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(shape).to(dtype)
    value_cache = torch.randn(shape).to(dtype)
    order = torch.randperm(num_blocks)
    max_blocks = max(blocks_per_seq) + 1
    block_tables = torch.randint(0, num_blocks, (len(seq_lens), max_blocks), dtype=torch.int32)
    used = 0
    for i, count in enumerate(blocks_per_seq):
        block_tables[i, :count] = order[used : used + count].to(torch.int32)
        used += count
    return PagedBatch(
        key_cache.to(device),
        value_cache.to(device),
        block_tables.to(device),
        torch.tensor(seq_lens, dtype=torch.int32, device=device),
    )


def query_start_loc(query_lens: list[int], device: str) -> torch.Tensor:
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    return torch.tensor(starts, dtype=torch.int32, device=device)
