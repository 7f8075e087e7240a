"""KV-cache write: every slot named by slot_mapping gets its token's K and V, nothing else."""

from __future__ import annotations

import pytest
import torch

import kernels.reference as ref
from tests.support.kernel_cases import CASES


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize(("num_kv_heads", "head_dim", "block_size"), [(2, 16, 4), (1, 32, 16)])
def test_reshape_and_cache_writes_exactly_the_mapped_slots(
    triton_ops, device, dtype, num_kv_heads, head_dim, block_size
):
    num_blocks, num_tokens = 6, 11
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(cache_shape).to(dtype).to(device)
    value_cache = torch.randn(cache_shape).to(dtype).to(device)
    # Slots across block boundaries, the last slot of the cache, and two padding tokens.
    slots = torch.randperm(num_blocks * block_size)[:num_tokens]
    slots[0], slots[3], slots[7] = num_blocks * block_size - 1, -1, -1
    slot_mapping = slots.to(torch.int64).to(device)
    # K and V are column slices of a fused projection output, as a model produces them.
    qkv = torch.randn(num_tokens, 3 * num_kv_heads * head_dim).to(dtype).to(device)
    key = qkv[:, : num_kv_heads * head_dim].view(num_tokens, num_kv_heads, head_dim)
    value = qkv[:, num_kv_heads * head_dim : 2 * num_kv_heads * head_dim].view(
        num_tokens, num_kv_heads, head_dim
    )
    expected_key, expected_value = key_cache.clone(), value_cache.clone()
    ref.reshape_and_cache(key, value, expected_key, expected_value, slot_mapping)
    triton_ops.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
    assert torch.equal(key_cache, expected_key)
    assert torch.equal(value_cache, expected_value)
    flat = key_cache.view(-1, num_kv_heads, head_dim)
    assert torch.equal(flat[slot_mapping[1]], key[1])


def test_reshape_and_cache_rejects_bad_layouts(triton_ops):
    key = torch.randn(3, 2, 16)
    cache = torch.randn(4, 8, 2, 16)
    slots = torch.arange(3)
    with pytest.raises(ValueError, match=r"key_cache must be contiguous"):
        triton_ops.reshape_and_cache(key, key, cache.transpose(0, 1), cache.transpose(0, 1), slots)
    with pytest.raises(ValueError, match=r"head_dim\) must be 16; got 8"):
        triton_ops.reshape_and_cache(key[..., :8], key[..., :8], cache, cache, slots)
    with pytest.raises(ValueError, match="slot_mapping must have dtype int64, int32"):
        triton_ops.reshape_and_cache(key, key, cache, cache, slots.float())
    with pytest.raises(ValueError, match=r"num_tokens\) must be 3; got 2"):
        triton_ops.reshape_and_cache(key, key, cache, cache, slots[:2])
    with pytest.raises(ValueError, match="must share one dtype"):
        triton_ops.reshape_and_cache(key, key, cache.half(), cache.half(), slots)
