"""The PyTorch backend's one-sequence decode (a view of the cache, or whole blocks selected)
against plain causal attention over the same keys, for consecutive and scattered blocks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend

BS, KV_HEADS, HEADS, DIM, NUM_BLOCKS = 4, 2, 6, 8, 32


CASES = [
    *[([5, 6, 7, 8, 9], n) for n in (1, 4, 5, 17, 20)],  # consecutive: a view of the cache
    *[([9, 2, 30, 3, 17], n) for n in (1, 4, 5, 17, 20)],  # scattered: blocks selected
    ([11], 3),
]


@pytest.mark.parametrize(("table", "length"), CASES)
def test_single_sequence_decode_matches_dense_attention(table, length):
    gen = torch.Generator().manual_seed(len(table) * 100 + length)
    k_cache = torch.randn(NUM_BLOCKS, BS, KV_HEADS, DIM, generator=gen)
    v_cache = torch.randn(NUM_BLOCKS, BS, KV_HEADS, DIM, generator=gen)
    query = torch.randn(1, HEADS, DIM, generator=gen)
    pos = length - 1
    metadata = AttentionMetadata(
        slot_mapping=torch.tensor([table[pos // BS] * BS + pos % BS]),
        seq_lens=torch.tensor([length]),
        block_tables=torch.tensor([table]),
        seq_lens_list=[length],
        query_start_loc=[0, 1],
        num_decodes=1,
        block_size=BS,
    )
    backend = TorchAttentionBackend()
    backend.prepare(metadata)
    key = k_cache[table[pos // BS], pos % BS][None]
    value = v_cache[table[pos // BS], pos % BS][None]
    out = backend.attend(query, key, value, k_cache, v_cache, metadata, DIM**-0.5)

    slots = [table[p // BS] * BS + p % BS for p in range(length)]
    k = k_cache.view(-1, KV_HEADS, DIM)[slots].transpose(0, 1)  # [kv_heads, length, dim]
    v = v_cache.view(-1, KV_HEADS, DIM)[slots].transpose(0, 1)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=0)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=0)
    expected = F.scaled_dot_product_attention(query.transpose(0, 1), k, v, scale=DIM**-0.5)
    torch.testing.assert_close(out, expected.transpose(0, 1), atol=1e-5, rtol=1e-5)
