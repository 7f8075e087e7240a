"""The PyTorch backend's prompt chunks on a CPU, against attention computed densely in float64:
chunks that follow cached context (their context and their own keys attended unmasked, merged
by log-sum-exp) next to a whole prompt and a decode in the same step."""

from __future__ import annotations

import pytest
import torch

from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend

BS, NUM_BLOCKS = 4, 64


def _dense(query, keys, values, context: int, scale: float) -> torch.Tensor:
    """[query_len, heads, dim]: query i at position context + i sees keys 0..context + i."""
    heads, kv_heads = query.shape[1], keys.shape[1]
    k = keys.double().repeat_interleave(heads // kv_heads, dim=1)
    v = values.double().repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query.double(), k) * scale
    positions = torch.arange(keys.shape[0])
    visible = positions[None, :] <= (context + torch.arange(query.shape[0]))[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


@pytest.mark.parametrize(
    ("dtype", "heads", "kv_heads", "tolerance"),
    [(torch.float32, 6, 2, 1e-5), (torch.float32, 4, 4, 1e-5), (torch.bfloat16, 6, 2, 2e-2)],
)
def test_chunks_after_context_match_dense_attention(dtype, heads, kv_heads, tolerance):
    dim, scale = 16, 16**-0.5
    gen = torch.Generator().manual_seed(heads * 10 + kv_heads)
    k_cache = torch.randn(NUM_BLOCKS, BS, kv_heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(NUM_BLOCKS, BS, kv_heads, dim, generator=gen).to(dtype)
    # (cached context, new tokens) per sequence: a decode, chunks after context of several
    # shapes (one inside a block, one longer than its context), and a whole prompt.
    shapes = [(12, 1), (3, 9), (40, 7), (5, 30), (0, 11)]
    perm = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    tables, slot_mapping, start = [], [], 0
    for context, new in shapes:
        blocks = -(-(context + new) // BS)
        tables.append(perm[start : start + blocks])
        start += blocks
        slot_mapping += [tables[-1][p // BS] * BS + p % BS for p in range(context, context + new)]
    width = max(map(len, tables))
    new_total = sum(new for _, new in shapes)
    query = torch.randn(new_total, heads, dim, generator=gen).to(dtype)
    key = torch.randn(new_total, kv_heads, dim, generator=gen).to(dtype)
    value = torch.randn(new_total, kv_heads, dim, generator=gen).to(dtype)
    offsets = [0]
    for _, new in shapes:
        offsets.append(offsets[-1] + new)
    metadata = AttentionMetadata(
        slot_mapping=torch.tensor(slot_mapping),
        seq_lens=torch.tensor([c + n for c, n in shapes]),
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables]),
        seq_lens_list=[c + n for c, n in shapes],
        query_start_loc=offsets,
        num_decodes=1,
        block_size=BS,
    )
    backend = TorchAttentionBackend()
    backend.prepare(metadata)
    backend.write_kv(key, value, k_cache, v_cache, metadata)
    out = backend.attend(query, key, value, k_cache, v_cache, metadata, scale)

    for s, (context, new) in enumerate(shapes):
        slots = [tables[s][p // BS] * BS + p % BS for p in range(context + new)]
        keys = k_cache.view(-1, kv_heads, dim)[slots]
        values = v_cache.view(-1, kv_heads, dim)[slots]
        rows = slice(offsets[s], offsets[s + 1])
        expected = _dense(query[rows], keys, values, context, scale)
        torch.testing.assert_close(
            out[rows].double(), expected, atol=tolerance, rtol=tolerance, msg=f"sequence {s}"
        )
