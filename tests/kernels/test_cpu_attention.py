"""The native CPU paged decode attention (kernels/cpu/attention.cpp) against its PyTorch path."""

from __future__ import annotations

import pytest
import torch

from engine.attention import torch_backend
from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend

BLOCK = 16


def _paged(seq_lens: list[int], heads: int, kv_heads: int, head_dim: int, seed: int):
    """Random caches, scattered (non-consecutive) block tables and one query per sequence."""
    gen = torch.Generator().manual_seed(seed)
    blocks_each = [-(-n // BLOCK) for n in seq_lens]
    num_blocks = sum(blocks_each) + 3
    k_cache = torch.randn(num_blocks, BLOCK, kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_blocks, BLOCK, kv_heads, head_dim, generator=gen)
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.zeros(len(seq_lens), max(blocks_each), dtype=torch.long)
    for i, n in enumerate(blocks_each):
        tables[i, :n] = torch.tensor(order[:n])
        order = order[n:]
    query = torch.randn(len(seq_lens), heads, head_dim, generator=gen)
    return query, k_cache, v_cache, tables, torch.tensor(seq_lens)


def _exact(query, k_cache, v_cache, tables, seq_lens, scale):
    """Softmax attention per sequence in float64, K/V read through the block table."""
    kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    group = query.shape[1] // kv_heads
    out = []
    for i, n in enumerate(seq_lens.tolist()):
        slots = (tables[i, :, None] * BLOCK + torch.arange(BLOCK)).reshape(-1)[:n]
        k = k_cache.view(-1, kv_heads, head_dim)[slots].double().repeat_interleave(group, 1)
        v = v_cache.view(-1, kv_heads, head_dim)[slots].double().repeat_interleave(group, 1)
        weights = torch.softmax(torch.einsum("hd,thd->ht", query[i].double(), k) * scale, -1)
        out.append(torch.einsum("ht,thd->hd", weights, v))
    return torch.stack(out).float()


@pytest.mark.parametrize(
    ("seq_lens", "heads", "kv_heads", "head_dim"),
    [
        ([1, 15, 16, 17, 100], 9, 3, 64),  # block edges, GQA as in SmolLM2
        ([40, 3], 4, 4, 40),  # no GQA, head_dim not a multiple of the vector width
        ([300], 16, 2, 128),  # one long stream, wide groups
    ],
)
def test_decode_attention_matches_exact_attention(ops, seq_lens, heads, kv_heads, head_dim):
    query, k_cache, v_cache, tables, lens = _paged(seq_lens, heads, kv_heads, head_dim, 0)
    scale = head_dim**-0.5
    got = ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, scale)
    torch.testing.assert_close(
        got, _exact(query, k_cache, v_cache, tables, lens, scale), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("seq_lens", [[1], [2], [37], [1, 200]])
def test_fewer_sequences_than_threads_split_their_tokens(ops, threads, seq_lens):
    """A stream's tokens are split into parts of fixed length, spread over the threads and
    merged (flash-decoding); a 1-token sequence is one part, on one of 3 threads."""
    query, k_cache, v_cache, tables, lens = _paged(seq_lens, 9, 3, 64, 5)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, 0.125)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(
        got, _exact(query, k_cache, v_cache, tables, lens, 0.125), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(("context", "rows", "head_dim"), [(0, 8, 64), (121, 4, 40), (700, 8, 64)])
def test_verification_rows_match_exact_attention(ops, context, rows, head_dim):
    """Rows of one sequence at positions context .. context + rows - 1, sharing a block table
    (a speculative verification step), which the kernel runs together."""
    query, k_cache, v_cache, tables, _ = _paged([context + rows], 9, 3, head_dim, 6)
    query = torch.randn(rows, 9, head_dim, generator=torch.Generator().manual_seed(7))
    tables, lens = tables.repeat(rows, 1), torch.arange(context + 1, context + rows + 1)
    scale = head_dim**-0.5
    got = ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, scale)
    torch.testing.assert_close(
        got, _exact(query, k_cache, v_cache, tables, lens, scale), rtol=1e-5, atol=1e-5
    )


def test_bfloat16_decode_attention_matches_exact_attention(ops):
    """A bfloat16 cache and query (read in float32), the output rounded once to bfloat16."""
    query, k_cache, v_cache, tables, lens = _paged([1, 17, 130], 16, 8, 128, 4)
    query, k_cache, v_cache = query.bfloat16(), k_cache.bfloat16(), v_cache.bfloat16()
    got = ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, 0.09)
    assert got.dtype == torch.bfloat16
    want = _exact(query.float(), k_cache.float(), v_cache.float(), tables, lens, 0.09)
    torch.testing.assert_close(got.float(), want, rtol=8e-3, atol=1e-3)


def test_the_backend_gives_the_same_output_on_either_decode_path(ops, monkeypatch):
    """The attention backend's native decode (a float32 CPU step) and its PyTorch path."""
    seq_lens = [5, 33, 64, 20]
    query, k_cache, v_cache, tables, lens = _paged(seq_lens, 6, 2, 32, 1)
    metadata = AttentionMetadata(
        slot_mapping=torch.zeros(4, dtype=torch.long),
        seq_lens=lens,
        block_tables=tables,
        seq_lens_list=seq_lens,
        query_start_loc=[0, 1, 2, 3, 4],
        num_decodes=4,
        block_size=BLOCK,
    )
    backend = TorchAttentionBackend()
    backend.prepare(metadata)
    key = torch.zeros(4, 2, 32)
    native = backend.attend(query, key, key, k_cache, v_cache, metadata, 0.2)
    monkeypatch.setattr(torch_backend, "cpu_ops", lambda x: None)
    backend.prepare(metadata)
    eager = backend.attend(query, key, key, k_cache, v_cache, metadata, 0.2)
    torch.testing.assert_close(native, eager, rtol=1e-5, atol=1e-5)


def test_a_block_table_outside_the_cache_is_refused(ops):
    query, k_cache, v_cache, tables, lens = _paged([20], 2, 1, 8, 2)
    tables[0, 1] = k_cache.shape[0]  # one past the last block
    with pytest.raises(RuntimeError, match="names block"):
        ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, 1.0)
    with pytest.raises(RuntimeError, match="its block table holds"):
        ops.paged_decode_attention(query, k_cache, v_cache, tables, lens * 10, 1.0)


def test_write_kv_stores_each_token_at_its_slot(ops):
    """The native write of a step's K/V (strided rows, as a qkv split gives) and index_copy_."""
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(5, 3 * 2 * 8, generator=gen)
    key = qkv[:, 16:32].view(5, 2, 8)
    value = qkv[:, 32:].view(5, 2, 8)
    slots = torch.tensor([0, 17, 5, 40, 63])
    k_cache, v_cache = torch.zeros(4, BLOCK, 2, 8), torch.zeros(4, BLOCK, 2, 8)
    ops.write_kv(key, value, k_cache, v_cache, slots)
    want_k = torch.zeros(64, 2, 8).index_copy_(0, slots, key)
    want_v = torch.zeros(64, 2, 8).index_copy_(0, slots, value)
    assert torch.equal(k_cache.view(64, 2, 8), want_k)
    assert torch.equal(v_cache.view(64, 2, 8), want_v)
    with pytest.raises(RuntimeError, match="outside the cache"):
        ops.write_kv(key, value, k_cache, v_cache, slots + 1)
    with pytest.raises(RuntimeError, match="the cache's dtype"):
        ops.write_kv(key.bfloat16(), value.bfloat16(), k_cache, v_cache, slots)


def test_write_kv_stores_bfloat16_rows(ops):
    gen = torch.Generator().manual_seed(5)
    key = torch.randn(3, 2, 8, generator=gen).bfloat16()
    value = torch.randn(3, 2, 8, generator=gen).bfloat16()
    slots = torch.tensor([9, 2, 30])
    k_cache = torch.zeros(2, BLOCK, 2, 8, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    ops.write_kv(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache.view(32, 2, 8)[slots], key)
    assert torch.equal(v_cache.view(32, 2, 8)[slots], value)
