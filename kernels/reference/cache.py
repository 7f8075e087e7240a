"""Reference KV-cache write: scatter each token's K and V to its slot in the paged cache."""

from __future__ import annotations

import torch


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write in place: ``key_cache[slot // block_size, slot % block_size] = key[token]``.

    key, value:             [num_tokens, num_kv_heads, head_dim]
    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping:           [num_tokens] int64, slot = block_id * block_size + offset;
                            a negative slot marks a padding token that is not written.
    """
    num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    key_cache.view(-1, num_kv_heads, head_dim)[slots] = key[valid]
    value_cache.view(-1, num_kv_heads, head_dim)[slots] = value[valid]
