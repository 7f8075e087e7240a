"""Prefill-chunk attention over the paged cache: fresh, prefix-cached and chunked prefills."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernels.reference as ref
from tests.kernels.paged import make_paged_batch, query_start_loc
from tests.support.kernel_cases import CASES, tolerance

# (query_len, seq_len) per sequence: a fresh prompt, a prompt whose first 16 tokens hit the
# prefix cache, a middle chunk of a long prompt, a decode riding in the same batch, a chunk
# that ends on a block boundary, and a sequence with nothing scheduled this step.
SEQUENCES = [(21, 21), (7, 23), (16, 48), (1, 30), (8, 40), (0, 12)]


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("block_size", [8, 32])
def test_prefill_matches_reference(triton_ops, device, dtype, num_heads, num_kv_heads, block_size):
    query_lens = [q for q, _ in SEQUENCES]
    head_dim = 16 if block_size == 32 else 32
    batch = make_paged_batch(
        [s for _, s in SEQUENCES],
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        dtype=dtype,
        device=device,
    )
    query = torch.randn(sum(query_lens), num_heads, head_dim).to(dtype).to(device)
    args = (
        query,
        batch.key_cache,
        batch.value_cache,
        batch.block_tables,
        query_start_loc(query_lens, device),
        batch.seq_lens,
        0.2,
        max(query_lens),
    )
    out = triton_ops.paged_prefill_attention(*args)
    torch.testing.assert_close(out, ref.paged_prefill_attention(*args), **tolerance(dtype))


def test_reference_prefill_equals_sdpa_on_contiguous_kv():
    """The reference's chunk semantics (bottom-right causal mask) checked against PyTorch SDPA."""
    q_len, seq_len, num_heads, num_kv_heads, head_dim = 5, 13, 4, 2, 16
    batch = make_paged_batch(
        [seq_len],
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        block_size=4,
        dtype=torch.float64,
        device="cpu",
    )
    query = torch.randn(q_len, num_heads, head_dim, dtype=torch.float64)
    out = ref.paged_prefill_attention(
        query,
        batch.key_cache,
        batch.value_cache,
        batch.block_tables,
        query_start_loc([q_len], "cpu"),
        batch.seq_lens,
        0.25,
        q_len,
    )
    blocks = batch.block_tables[0, :4].long()
    keys = batch.key_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len]
    values = batch.value_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len]
    mask = torch.ones(q_len, seq_len, dtype=torch.bool).tril(diagonal=seq_len - q_len)
    expected = F.scaled_dot_product_attention(
        query.transpose(0, 1),
        keys.transpose(0, 1).repeat_interleave(2, 0),
        values.transpose(0, 1).repeat_interleave(2, 0),
        attn_mask=mask,
        scale=0.25,
    ).transpose(0, 1)
    torch.testing.assert_close(out, expected)


def test_prefill_chunks_equal_one_whole_prefill(triton_ops, device):
    """Chunked prefill must give every token the output the unchunked prefill gives it."""
    seq_len, num_heads, head_dim = 40, 4, 16
    batch = make_paged_batch(
        [seq_len],
        num_kv_heads=2,
        head_dim=head_dim,
        block_size=8,
        dtype=torch.float32,
        device=device,
    )
    query = torch.randn(seq_len, num_heads, head_dim).to(device)
    caches = (batch.key_cache, batch.value_cache, batch.block_tables)
    whole = triton_ops.paged_prefill_attention(
        query, *caches, query_start_loc([seq_len], device), batch.seq_lens, 0.25, seq_len
    )
    chunks = []
    for start, end in [(0, 13), (13, 29), (29, 40)]:
        chunks.append(
            triton_ops.paged_prefill_attention(
                query[start:end],
                *caches,
                query_start_loc([end - start], device),
                torch.tensor([end], dtype=torch.int32, device=device),
                0.25,
                end - start,
            )
        )
    torch.testing.assert_close(torch.cat(chunks), whole, atol=1e-6, rtol=1e-5)


def test_prefill_rejects_bad_arguments(triton_ops):
    batch = make_paged_batch(
        [5, 9], num_kv_heads=2, head_dim=16, block_size=4, dtype=torch.float32, device="cpu"
    )
    query = torch.randn(14, 4, 16)
    caches = (batch.key_cache, batch.value_cache, batch.block_tables)
    with pytest.raises(
        ValueError, match=r"query_start_loc.shape\[0\] \(num_seqs \+ 1\) must be 3; got 2"
    ):
        triton_ops.paged_prefill_attention(
            query, *caches, query_start_loc([5], "cpu"), batch.seq_lens, 0.25, 9
        )
    with pytest.raises(ValueError, match="key_cache must be contiguous"):
        triton_ops.paged_prefill_attention(
            query,
            batch.key_cache.transpose(1, 2).contiguous().transpose(1, 2),
            batch.value_cache,
            batch.block_tables,
            query_start_loc([5, 9], "cpu"),
            batch.seq_lens,
            0.25,
            9,
        )
    with pytest.raises(ValueError, match="query, key_cache, value_cache must share one dtype"):
        triton_ops.paged_prefill_attention(
            query.half(), *caches, query_start_loc([5, 9], "cpu"), batch.seq_lens, 0.25, 9
        )
