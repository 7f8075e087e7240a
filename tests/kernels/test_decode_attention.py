"""Paged decode attention: ragged contexts, block boundaries, GQA ratios, partitions > 1."""

from __future__ import annotations

import importlib

import pytest
import torch

import kernels.reference as ref
from tests.kernels.paged import make_paged_batch
from tests.support.kernel_cases import CASES, tolerance

# Ragged lengths: a single token, exactly one and two blocks of 16, one past a boundary, long.
SEQ_LENS = [1, 16, 17, 32, 45, 77]


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (4, 2), (8, 2)])
@pytest.mark.parametrize("partition_size", [16, 512], ids=["partitions", "single"])
def test_decode_matches_reference(
    triton_ops, device, dtype, num_heads, num_kv_heads, partition_size
):
    head_dim, block_size = 32, 8
    batch = make_paged_batch(
        SEQ_LENS,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        dtype=dtype,
        device=device,
    )
    query = torch.randn(len(SEQ_LENS), num_heads, head_dim).to(dtype).to(device)
    args = (query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, 0.3)
    # max_seq_len above the real maximum, as under a captured CUDA graph
    out = triton_ops.paged_decode_attention(*args, 96, partition_size)
    torch.testing.assert_close(
        out, ref.paged_decode_attention(*args, 96, partition_size), **tolerance(dtype)
    )


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_decode_in_one_partition_reads_contexts_past_the_partition_size(
    triton_ops, device, dtype, monkeypatch
):
    # A batch with programs enough for one partition each (here: a GPU taken to have one
    # multiprocessor), bounded by a model length far past its contexts, as under a CUDA graph.
    module = importlib.import_module("kernels.decode_attention")
    monkeypatch.setattr(module, "_sm_count", lambda device: 1)
    lens = [1, 512, 513, 700, 1100]
    batch = make_paged_batch(
        lens, num_kv_heads=2, head_dim=32, block_size=16, dtype=dtype, device=device
    )
    query = torch.randn(len(lens), 4, 32).to(dtype).to(device)
    args = (query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, 0.2)
    assert triton_ops.decode_partitioning(len(lens), 2, query.device) == 32768
    out = triton_ops.paged_decode_attention(*args, 4096)
    torch.testing.assert_close(out, ref.paged_decode_attention(*args, 4096), **tolerance(dtype))


def test_decode_partitions_by_the_programs_a_multiprocessor_gets(triton_ops):
    # Without a GPU the choice is a Hopper's (132 multiprocessors).
    choose, cpu = triton_ops.decode_partitioning, torch.device("cpu")
    assert choose(64, 8, cpu) == 32768  # 3.9 programs each: one partition, whole contexts
    assert choose(8, 8, cpu) == 512
    assert choose(1, 8, cpu) == 256  # one sequence: smaller partitions, more programs


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_decode_with_block_size_above_the_tile_and_small_head(triton_ops, device, dtype):
    # 32-token blocks, 16-wide heads, one KV head for all query heads (multi-query attention)
    batch = make_paged_batch(
        [5, 33, 64], num_kv_heads=1, head_dim=16, block_size=32, dtype=dtype, device=device
    )
    query = torch.randn(3, 4, 16).to(dtype).to(device)
    args = (query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, 0.25)
    out = triton_ops.paged_decode_attention(*args, 64, 16)
    torch.testing.assert_close(out, ref.paged_decode_attention(*args, 64, 16), **tolerance(dtype))


def test_decode_reads_only_its_own_blocks(triton_ops, device):
    # Doubling every value outside the sequence's blocks must not change its output.
    batch = make_paged_batch(
        [9], num_kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32, device=device
    )
    query = torch.randn(1, 2, 16).to(device)
    args = (query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, 0.25)
    before = triton_ops.paged_decode_attention(*args, 16, 16)
    own = batch.block_tables[0, :3].long()
    others = torch.ones(batch.value_cache.shape[0], dtype=torch.bool, device=device)
    others[own] = False
    batch.value_cache[others] *= 2
    batch.key_cache[others] *= 2
    after = triton_ops.paged_decode_attention(*args, 16, 16)
    torch.testing.assert_close(after, before, atol=0, rtol=0)


def test_decode_rejects_bad_arguments(triton_ops):
    batch = make_paged_batch(
        [5, 9], num_kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32, device="cpu"
    )
    caches = (batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens)
    with pytest.raises(
        ValueError, match=r"query heads \(3\) must be a multiple of the cache's KV heads \(2\)"
    ):
        triton_ops.paged_decode_attention(torch.randn(2, 3, 16), *caches, 0.25, 16)
    with pytest.raises(ValueError, match="block_tables must have dtype int32; got int64"):
        triton_ops.paged_decode_attention(
            torch.randn(2, 4, 16),
            batch.key_cache,
            batch.value_cache,
            batch.block_tables.long(),
            batch.seq_lens,
            0.25,
            16,
        )
    with pytest.raises(ValueError, match="partition_size must be a positive power of two; got 48"):
        triton_ops.paged_decode_attention(torch.randn(2, 4, 16), *caches, 0.25, 16, 48)
    with pytest.raises(ValueError, match="query has 3 sequences but seq_lens has 2"):
        triton_ops.paged_decode_attention(torch.randn(3, 4, 16), *caches, 0.25, 16)
    with pytest.raises(ValueError, match="max_seq_len must be positive"):
        triton_ops.paged_decode_attention(torch.randn(2, 4, 16), *caches, 0.25, 0)
