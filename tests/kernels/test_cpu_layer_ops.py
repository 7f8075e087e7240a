"""The native CPU layer ops (kernels/cpu/layer_ops.cpp) against their PyTorch references."""

from __future__ import annotations

import pytest
import torch

from engine.layers.rotary import RotaryEmbedding
from kernels import reference
from kernels.cpu import reference as cpu_reference

SHAPES = [(1, 576), (5, 64), (40, 7), (3, 1536)]  # (tokens, hidden): decode, prefill, odd widths


def _rows(tokens: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, hidden, generator=gen), torch.rand(hidden, generator=gen) + 0.5


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_rms_norm_matches_the_reference(ops, tokens, hidden):
    x, w = _rows(tokens, hidden, 0)
    # the sum of squares runs in another order: the last bit or so may differ
    torch.testing.assert_close(
        ops.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6), rtol=2e-6, atol=1e-6
    )


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_fused_add_rms_norm_matches_the_reference(ops, tokens, hidden):
    x, w = _rows(tokens, hidden, 1)
    residual, _ = _rows(tokens, hidden, 2)
    out, summed = ops.fused_add_rms_norm(x, residual, w, 1e-5)
    ref_out, ref_summed = reference.fused_add_rms_norm(x, residual, w, 1e-5)
    assert torch.equal(summed, ref_summed)
    torch.testing.assert_close(out, ref_out, rtol=2e-6, atol=1e-6)


def test_rotary_is_bit_identical_to_the_engine_reference(ops):
    """On the strided q and k a fused qkv projection gives (views into one [T, width] row)."""
    heads, kv_heads, head_dim, tokens = 9, 3, 64, 6
    rotary = RotaryEmbedding(
        head_dim, 10000.0, None, 512, dtype=torch.float32, device=torch.device("cpu")
    )
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen)
    q, k, _ = qkv.split((heads * head_dim, kv_heads * head_dim, kv_heads * head_dim), dim=-1)
    q = q.view(tokens, heads, head_dim)
    k = k.view(tokens, kv_heads, head_dim)
    positions = torch.tensor([0, 1, 7, 300, 511, 42])
    got_q, got_k = ops.rotary_embedding(positions, q, k, rotary.cos, rotary.sin)
    want_q, want_k = cpu_reference.rotary_embedding(positions, q, k, rotary.cos, rotary.sin)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_silu_and_mul_matches_the_reference(ops, tokens, hidden):
    x, _ = _rows(tokens, 2 * hidden, 4)
    torch.testing.assert_close(ops.silu_and_mul(x), reference.silu_and_mul(x), rtol=2e-6, atol=1e-6)


def test_silu_and_mul_holds_at_the_ends_of_the_float_range(ops):
    """Where exp overflows or underflows (the vector exp clamps its input)."""
    gate = torch.tensor([[-1000.0, -100.0, -88.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 88.0, 100.0]])
    x = torch.cat((gate, torch.full_like(gate, 3.0)), dim=-1)
    torch.testing.assert_close(ops.silu_and_mul(x), reference.silu_and_mul(x), rtol=2e-6, atol=1e-6)


def _assert_bf16_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """bfloat16 results: mostly the same bits; where the float32 value before the last rounding
    differs in its last bit (another sum order, a polynomial exp), one bfloat16 step apart."""
    assert got.dtype == want.dtype == torch.bfloat16
    assert (got == want).float().mean() >= 0.99
    torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=1e-5)


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_bfloat16_norms_round_where_the_reference_rounds(ops, tokens, hidden):
    x, w = (t.bfloat16() for t in _rows(tokens, hidden, 6))
    residual, _ = _rows(tokens, hidden, 7)
    residual = residual.bfloat16()
    _assert_bf16_close(ops.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6))
    out, summed = ops.fused_add_rms_norm(x, residual, w, 1e-6)
    ref_out, ref_summed = reference.fused_add_rms_norm(x, residual, w, 1e-6)
    assert torch.equal(summed, ref_summed)
    _assert_bf16_close(out, ref_out)


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_bfloat16_silu_and_mul_rounds_where_the_reference_rounds(ops, tokens, hidden):
    x = _rows(tokens, 2 * hidden, 8)[0].bfloat16()
    _assert_bf16_close(ops.silu_and_mul(x), reference.silu_and_mul(x))


def test_bfloat16_rotary_is_bit_identical_to_the_engine_reference(ops):
    """Each product and sum rounded to bfloat16, as the reference's separate ops round them
    (72 = 64 + 8: the vector loop and the scalar tail)."""
    heads, kv_heads, head_dim, tokens = 4, 2, 144, 5
    rotary = RotaryEmbedding(
        head_dim, 10000.0, None, 512, dtype=torch.bfloat16, device=torch.device("cpu")
    )
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(tokens, heads, head_dim, generator=gen).bfloat16()
    k = torch.randn(tokens, kv_heads, head_dim, generator=gen).bfloat16()
    positions = torch.tensor([0, 3, 99, 260, 511])
    got_q, got_k = ops.rotary_embedding(positions, q, k, rotary.cos, rotary.sin)
    want_q, want_k = cpu_reference.rotary_embedding(positions, q, k, rotary.cos, rotary.sin)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


def test_bad_inputs_are_refused_with_the_reason(ops):
    x, w = _rows(2, 8, 5)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        ops.rms_norm(x.double(), w, 1e-6)
    with pytest.raises(RuntimeError, match="weight must be BFloat16"):
        ops.rms_norm(x.bfloat16(), w, 1e-6)
    with pytest.raises(RuntimeError, match="weight must be 8"):
        ops.rms_norm(x, w[:4], 1e-6)
    rotary = RotaryEmbedding(8, 10000.0, None, 16, dtype=torch.float32, device=torch.device("cpu"))
    q = torch.randn(1, 2, 8)
    with pytest.raises(RuntimeError, match="outside the table"):
        ops.rotary_embedding(torch.tensor([16]), q, q, rotary.cos, rotary.sin)
