"""Paged attention in plain PyTorch: the CPU path and the reference for other backends.

Decodes run as a few batched calls: each sequence's keys are gathered from its blocks into a
padded [group, max_len] tensor and padding is masked. Gathering dominates the cost, so decodes
of similar length (the runner sorts them) are grouped to keep padding small. On a CPU, a
sequence decoding alone (one stream) skips the per-token gather: its K/V are a view of the
cache when its blocks are consecutive, whole blocks selected otherwise, with no mask. Prefill chunks run one sequence at a
time; a chunk with no cached context attends to its own fresh K/V without touching the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention.backend import AttentionBackend, AttentionMetadata


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def prepare(self, metadata: AttentionMetadata) -> None:
        bs = metadata.block_size
        state = metadata.backend_state
        device = metadata.block_tables.device
        nd = metadata.num_decodes
        offsets = torch.arange(bs, device=device)
        groups = []
        for start, end in _length_groups(metadata.seq_lens_list[:nd]):
            max_len = max(metadata.seq_lens_list[start:end])
            num_blocks = -(-max_len // bs)
            tables = metadata.block_tables[start:end, :num_blocks]
            if end - start == 1 and device.type == "cpu":
                # One sequence alone: no padding, no mask, whole blocks (see _single_sequence).
                groups.append((start, end, (tables[0], max_len), None))
                continue
            # [group, num_blocks * block_size] slot of every context position
            slots = (tables[:, :, None] * bs + offsets).reshape(end - start, -1)
            positions = torch.arange(num_blocks * bs, device=device)
            # [group, 1, 1, max_len] True where the position holds context
            mask = positions[None, :] < metadata.seq_lens[start:end, None]
            groups.append((start, end, slots, mask[:, None, None, :]))
        state["decode_groups"] = groups
        prefills = []
        for s in range(nd, metadata.num_seqs):
            start, end = metadata.query_start_loc[s], metadata.query_start_loc[s + 1]
            seq_len = metadata.seq_lens_list[s]
            query_len = end - start
            if seq_len == query_len:
                prefills.append((start, end, None, None))
                continue
            num_blocks = -(-seq_len // bs)
            slots = (metadata.block_tables[s, :num_blocks, None] * bs + offsets).reshape(-1)
            # Query i sits at position seq_len - query_len + i and sees keys up to it.
            key_pos = torch.arange(seq_len, device=device)
            query_pos = torch.arange(seq_len - query_len, seq_len, device=device)
            mask = key_pos[None, :] <= query_pos[:, None]
            prefills.append((start, end, slots[:seq_len], mask))
        state["prefills"] = prefills

    def write_kv(self, key, value, k_cache, v_cache, metadata):
        num_kv_heads, head_dim = key.shape[1], key.shape[2]
        slots = metadata.slot_mapping
        k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slots, key)
        v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slots, value)

    def attend(self, query, key, value, k_cache, v_cache, metadata, scale):
        num_kv_heads, head_dim = key.shape[1], key.shape[2]
        state = metadata.backend_state
        out = torch.empty_like(query)
        k_flat = k_cache.view(-1, num_kv_heads, head_dim)
        v_flat = v_cache.view(-1, num_kv_heads, head_dim)
        for start, end, slots, mask in state["decode_groups"]:
            if mask is None:  # one sequence: (its block table, its length)
                k, v = _single_sequence(k_cache, v_cache, *slots)
            else:
                k = k_flat[slots].transpose(1, 2)  # [group, kv_heads, max_len, head_dim]
                v = v_flat[slots].transpose(1, 2)
            q = query[start:end].unsqueeze(2)  # [group, heads, 1, head_dim]
            o = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
            )
            out[start:end] = o.squeeze(2)
        for start, end, slots, mask in state["prefills"]:
            q = query[start:end].transpose(0, 1)  # [heads, query_len, head_dim]
            if slots is None:
                k = key[start:end].transpose(0, 1)
                v = value[start:end].transpose(0, 1)
                o = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, scale=scale, enable_gqa=True
                )
            else:
                k = k_flat[slots].transpose(0, 1)  # [kv_heads, seq_len, head_dim]
                v = v_flat[slots].transpose(0, 1)
                o = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
                )
            out[start:end] = o.transpose(0, 1)
        return out


def _single_sequence(k_cache, v_cache, table: torch.Tensor, length: int):
    """K and V of one sequence as [1, kv_heads, length, head_dim], copied as little as may be.

    Consecutive blocks (what a fresh pool gives one stream) are a view of the cache: no copy.
    Otherwise whole blocks are selected (one index per block_size tokens, several times
    cheaper than indexing every token's slot). Either way the exact length needs no mask.
    """
    first = int(table[0])
    n = table.numel()
    if n == 1 or bool((table[1:] - table[:-1] == 1).all()):
        k, v = k_cache[first : first + n], v_cache[first : first + n]
    else:
        k, v = k_cache.index_select(0, table), v_cache.index_select(0, table)
    kv_heads, head_dim = k.shape[-2], k.shape[-1]
    k = k.view(-1, kv_heads, head_dim)[:length].transpose(0, 1)[None]
    v = v.view(-1, kv_heads, head_dim)[:length].transpose(0, 1)[None]
    return k, v


def _length_groups(seq_lens: list[int], min_group: int = 8, max_ratio: float = 1.5):
    """Split a run of (ideally sorted) lengths into contiguous groups of similar length."""
    groups = []
    start = 0
    for i in range(1, len(seq_lens) + 1):
        if i == len(seq_lens) or (
            i - start >= min_group and seq_lens[i] > max_ratio * seq_lens[start]
        ):
            groups.append((start, i))
            start = i
    return groups
