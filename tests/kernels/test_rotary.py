"""Rotary embedding: kernel against reference, and reference (cache included) against transformers."""

from __future__ import annotations

import pytest
import torch

import kernels.reference as ref
from tests.support.kernel_cases import CASES, tolerance

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (4, 2), (4, 1)])
def test_rotary_matches_reference(triton_ops, device, dtype, num_heads, num_kv_heads):
    head_dim, num_tokens = 32, 9
    cache = ref.rotary_cos_sin_cache(head_dim, 4096, 500000.0, LLAMA3_SCALING).to(device)
    positions = torch.tensor([0, 1, 2, 15, 16, 17, 1000, 4094, 4095]).to(device)
    # query and key as views into one fused projection output, like a model's qkv split
    qkv = torch.randn(num_tokens, (num_heads + 2 * num_kv_heads) * head_dim).to(dtype).to(device)
    query = qkv[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
    key = qkv[:, num_heads * head_dim : (num_heads + num_kv_heads) * head_dim].view(
        num_tokens, num_kv_heads, head_dim
    )
    query_out, key_out = triton_ops.apply_rotary_embedding(positions, query, key, cache)
    expected_query, expected_key = ref.apply_rotary_embedding(positions, query, key, cache)
    torch.testing.assert_close(query_out, expected_query, **tolerance(dtype))
    torch.testing.assert_close(key_out, expected_key, **tolerance(dtype))
    # position 0 is the identity rotation
    torch.testing.assert_close(query_out[0], query[0], atol=0, rtol=0)


def _transformers_rotary(config, positions, query, key):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rotary = LlamaRotaryEmbedding(config)
    cos, sin = rotary(query, positions[None, :])
    # transformers' layout is [batch, heads, tokens, head_dim]
    q, k = apply_rotary_pos_emb(query.transpose(0, 1)[None], key.transpose(0, 1)[None], cos, sin)
    return q[0].transpose(0, 1), k[0].transpose(0, 1)


@pytest.mark.parametrize("rope_type", ["default", "linear", "llama3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_rotary_equals_transformers(rope_type, dtype):
    from transformers import LlamaConfig

    scaling = {"default": None, "linear": {"rope_type": "linear", "factor": 4.0}}.get(
        rope_type, LLAMA3_SCALING
    )
    rope = {"rope_type": rope_type, "rope_theta": 500000.0, **(scaling or {})}
    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_parameters=rope,
        max_position_embeddings=32768,
    )
    positions = torch.tensor([0, 3, 100, 2047, 8191, 8192, 20000, 32767])
    query = torch.randn(8, 4, 64).to(dtype)
    key = torch.randn(8, 2, 64).to(dtype)
    cache = ref.rotary_cos_sin_cache(64, 32768, 500000.0, scaling)
    got_query, got_key = ref.apply_rotary_embedding(positions, query, key, cache)
    expected_query, expected_key = _transformers_rotary(config, positions, query, key)
    torch.testing.assert_close(got_query, expected_query, atol=0, rtol=0)
    torch.testing.assert_close(got_key, expected_key, atol=0, rtol=0)


def test_llama3_scaling_changes_only_low_frequencies():
    plain = ref.rotary_cos_sin_cache(128, 16, 500000.0)
    scaled = ref.rotary_cos_sin_cache(128, 16, 500000.0, LLAMA3_SCALING)
    # the highest frequencies (first columns) are untouched, the lowest are slowed down
    torch.testing.assert_close(scaled[:, :8], plain[:, :8])
    # sin(p * f) ~ p * f for the lowest frequency (last column): slowed down by `factor`
    ratio = scaled[15, -1] / plain[15, -1]
    assert ratio.item() == pytest.approx(1 / 8, rel=1e-4)


def test_cos_sin_cache_rejects_unknown_scaling():
    with pytest.raises(ValueError, match="unsupported rope scaling type 'yarn'"):
        ref.rotary_cos_sin_cache(64, 16, 10000.0, {"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ValueError, match="llama3 rope scaling needs 'low_freq_factor'"):
        ref.rotary_cos_sin_cache(64, 16, 10000.0, {"rope_type": "llama3", "factor": 8.0})


def test_rotary_rejects_bad_arguments(triton_ops):
    cache = ref.rotary_cos_sin_cache(32, 64, 10000.0)
    query, key = torch.randn(3, 4, 32), torch.randn(3, 2, 32)
    positions = torch.arange(3)
    with pytest.raises(ValueError, match="cos_sin_cache must have dtype float32"):
        triton_ops.apply_rotary_embedding(positions, query, key, cache.half())
    with pytest.raises(ValueError, match=r"positions.shape\[0\] \(num_tokens\) must be 3; got 2"):
        triton_ops.apply_rotary_embedding(positions[:2], query, key, cache)
    with pytest.raises(ValueError, match="positions must have dtype int32, int64"):
        triton_ops.apply_rotary_embedding(positions.float(), query, key, cache)
    with pytest.raises(ValueError, match=r"head_dim \(rotary over the full head\)"):
        triton_ops.apply_rotary_embedding(positions, query[..., :16], key[..., :16], cache)
