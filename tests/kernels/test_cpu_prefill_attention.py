"""The native CPU attention of a prompt chunk after cached context
(kernels/cpu/prefill_attention.cpp) against exact attention and the backend's PyTorch path."""

from __future__ import annotations

import pytest
import torch

from engine.attention import torch_backend
from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import NATIVE_CHUNK_MAX_TOKENS, TorchAttentionBackend

BLOCK = 16


def _sequence(seq_len: int, kv_heads: int, head_dim: int, seed: int, dtype=torch.float32):
    """Random caches with the sequence's blocks scattered, and its block table."""
    gen = torch.Generator().manual_seed(seed)
    blocks = -(-seq_len // BLOCK)
    num_blocks = blocks + 3
    shape = (num_blocks, BLOCK, kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    table = torch.randperm(num_blocks, generator=gen)[:blocks]
    return k_cache, v_cache, table


def _exact(query, k_cache, v_cache, table, seq_len, scale):
    """Causal softmax attention in float64: query i at position seq_len - q_len + i."""
    q_len, heads, head_dim = query.shape
    kv_heads = k_cache.shape[2]
    slots = (table[:, None] * BLOCK + torch.arange(BLOCK)).reshape(-1)[:seq_len]
    k = k_cache.view(-1, kv_heads, head_dim)[slots].double().repeat_interleave(heads // kv_heads, 1)
    v = v_cache.view(-1, kv_heads, head_dim)[slots].double().repeat_interleave(heads // kv_heads, 1)
    scores = torch.einsum("qhd,thd->hqt", query.double(), k) * scale
    positions = torch.arange(seq_len - q_len, seq_len)[:, None]
    scores = scores.masked_fill(torch.arange(seq_len)[None, :] > positions, float("-inf"))
    return torch.einsum("hqt,thd->qhd", torch.softmax(scores, -1), v).float()


@pytest.mark.parametrize(
    ("context", "q_len", "heads", "kv_heads", "head_dim"),
    [
        (1000, 40, 4, 2, 16),  # a conversation's next turn on the tiny llama
        (17, 33, 9, 3, 64),  # SmolLM2's heads; the chunk starts and ends inside blocks
        (100, 1, 9, 3, 64),  # one token
        (0, 70, 4, 4, 40),  # no context, no GQA, head_dim not a multiple of the vector width
        (300, 129, 16, 2, 128),  # wide groups: more rows than one work item takes
        (31, 5, 2, 1, 8),  # rows fewer than a vector
    ],
)
def test_chunk_attention_matches_exact_attention(ops, context, q_len, heads, kv_heads, head_dim):
    seq_len = context + q_len
    k_cache, v_cache, table = _sequence(seq_len, kv_heads, head_dim, 0)
    query = torch.randn(q_len, heads, head_dim, generator=torch.Generator().manual_seed(1))
    scale = head_dim**-0.5
    got = ops.paged_prefill_attention(query, k_cache, v_cache, table, seq_len, scale)
    want = _exact(query, k_cache, v_cache, table, seq_len, scale)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_result_does_not_depend_on_the_thread_count(ops, threads):
    """Work items are rows of one KV head; how many there are follows the threads, a row's
    result never does."""
    k_cache, v_cache, table = _sequence(250, 3, 64, 2)
    query = torch.randn(50, 9, 64, generator=torch.Generator().manual_seed(3))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = ops.paged_prefill_attention(query, k_cache, v_cache, table, 250, 0.125)
        torch.set_num_threads(threads)
        got = ops.paged_prefill_attention(query, k_cache, v_cache, table, 250, 0.125)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(got, alone)


def test_bfloat16_chunk_attention_matches_exact_attention(ops):
    """A bfloat16 cache and query (read in float32), the output rounded once to bfloat16."""
    k_cache, v_cache, table = _sequence(540, 3, 64, 4, torch.bfloat16)
    query = torch.randn(40, 9, 64, generator=torch.Generator().manual_seed(5)).bfloat16()
    got = ops.paged_prefill_attention(query, k_cache, v_cache, table, 540, 0.125)
    assert got.dtype == torch.bfloat16
    want = _exact(query.float(), k_cache.float(), v_cache.float(), table, 540, 0.125)
    torch.testing.assert_close(got.float(), want, rtol=8e-3, atol=2e-3)


def test_strided_query_rows_are_read_in_place(ops):
    """The query as the model hands it over: heads contiguous, tokens further apart (a view of
    the q|k|v projection)."""
    k_cache, v_cache, table = _sequence(90, 2, 16, 6)
    qkv = torch.randn(10, (4 + 2 + 2) * 16, generator=torch.Generator().manual_seed(7))
    query = qkv[:, : 4 * 16].view(10, 4, 16)
    assert not query.is_contiguous()
    got = ops.paged_prefill_attention(query, k_cache, v_cache, table, 90, 0.25)
    torch.testing.assert_close(got, _exact(query, k_cache, v_cache, table, 90, 0.25))


def test_bad_arguments_are_refused(ops):
    k_cache, v_cache, table = _sequence(40, 1, 8, 8)
    query = torch.randn(8, 2, 8)
    with pytest.raises(RuntimeError, match="block table holds"):
        ops.paged_prefill_attention(query, k_cache, v_cache, table, 400, 1.0)
    with pytest.raises(RuntimeError, match="names block"):
        bad = table.clone()
        bad[1] = k_cache.shape[0]
        ops.paged_prefill_attention(query, k_cache, v_cache, bad, 40, 1.0)
    with pytest.raises(RuntimeError, match="a chunk of 8 tokens in a sequence of 5"):
        ops.paged_prefill_attention(query, k_cache, v_cache, table, 5, 1.0)
    with pytest.raises(RuntimeError, match="the cache's dtype"):
        ops.paged_prefill_attention(query.bfloat16(), k_cache, v_cache, table, 40, 1.0)


def test_the_backend_gives_the_same_output_on_either_prefill_path(ops, monkeypatch):
    """A step of two decodes, a prompt with no context, a short chunk after context (the
    native kernel) and one longer than NATIVE_CHUNK_MAX_TOKENS (two flash calls), through the
    backend with the native ops and with plain PyTorch."""
    long = NATIVE_CHUNK_MAX_TOKENS + 20
    seq_lens = [30, 70, 24, 500 + 24, 300 + long]
    query_lens = [1, 1, 24, 24, long]
    kv_heads, heads, head_dim = 2, 6, 32
    gen = torch.Generator().manual_seed(9)
    tables, used = [], 0
    for n in seq_lens:
        blocks = -(-n // BLOCK)
        tables.append(list(range(used, used + blocks)))
        used += blocks
    perm = torch.randperm(used, generator=gen)  # scattered, as a block pool leaves them
    width = max(map(len, tables))
    block_tables = torch.tensor(
        [[int(perm[b]) for b in t] + [0] * (width - len(t)) for t in tables]
    )
    k_cache = torch.randn(used, BLOCK, kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(used, BLOCK, kv_heads, head_dim, generator=gen)
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    query = torch.randn(starts[-1], heads, head_dim, generator=gen)
    # The K/V of the step's own tokens, as write_kv put them in the cache before attention.
    slots = []
    for s, (n, q) in enumerate(zip(seq_lens, query_lens, strict=True)):
        for pos in range(n - q, n):
            slots.append(int(block_tables[s, pos // BLOCK]) * BLOCK + pos % BLOCK)
    slot_mapping = torch.tensor(slots)
    key = k_cache.view(-1, kv_heads, head_dim)[slot_mapping].clone()
    value = v_cache.view(-1, kv_heads, head_dim)[slot_mapping].clone()
    metadata = AttentionMetadata(
        slot_mapping=slot_mapping,
        seq_lens=torch.tensor(seq_lens),
        block_tables=block_tables,
        seq_lens_list=seq_lens,
        query_start_loc=starts,
        num_decodes=2,
        block_size=BLOCK,
    )
    backend = TorchAttentionBackend()
    backend.prepare(metadata)
    native = backend.attend(query, key, value, k_cache, v_cache, metadata, 0.2)
    monkeypatch.setattr(torch_backend, "cpu_ops", lambda x: None)
    backend.prepare(metadata)
    eager = backend.attend(query, key, value, k_cache, v_cache, metadata, 0.2)
    torch.testing.assert_close(native, eager, rtol=1e-5, atol=1e-5)
    chunk = slice(starts[3], starts[4])  # the short chunk after context, against exact
    want = _exact(query[chunk], k_cache, v_cache, block_tables[3], seq_lens[3], 0.2)
    torch.testing.assert_close(native[chunk], want, rtol=1e-5, atol=1e-5)
