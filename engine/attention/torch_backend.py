"""Paged attention in plain PyTorch: the CPU path and the reference for other backends.

On a CPU in float32 or bfloat16, decodes run in one call of the native kernel
(kernels/cpu/attention.cpp), which reads K/V from their blocks with no gather, and so does a
prompt chunk of up to NATIVE_CHUNK_MAX_TOKENS after cached context, a conversation's next turn
(kernels/cpu/prefill_attention.cpp); what follows is the PyTorch path, which serves other
dtypes, devices and longer chunks and is those kernels' reference.

Decodes run as a few batched calls: each sequence's keys are gathered from its blocks into a
padded [group, max_len] tensor and padding is masked. Gathering dominates the cost, so decodes
of similar length (the runner sorts them) are grouped to keep padding small. On a CPU, a
sequence decoding alone (one stream) skips the per-token gather: its K/V are a view of the
cache when its blocks are consecutive, whole blocks selected otherwise, with no mask. Prefill
chunks run one sequence at a time; a chunk with no cached context attends to its own fresh K/V
without touching the cache; on a CPU, a chunk after cached context attends to the context and
to itself in two unmasked calls (``_chunk_after_context``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention.backend import AttentionBackend, AttentionMetadata
from engine.layers.dispatch import cpu_ops

# Chunks after cached context up to this many tokens run in the native kernel on a CPU; longer
# ones in two flash calls (_chunk_after_context), whose matrix products catch up as chunks
# grow: on 2 cores one layer of SmolLM2's heads was 1.4-2.3 times faster in the kernel for 8
# to 128 tokens after 1,000 and 1.1 times for 512 (bench/chunk_attention.py), but 0.94 times
# for 256 after 2,000 and 0.8 for 2,048 after 2,048. A prompt's later chunks stay on the flash
# path.
NATIVE_CHUNK_MAX_TOKENS = 128


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def prepare(self, metadata: AttentionMetadata) -> None:
        state = metadata.backend_state
        state["decode_groups"] = None  # built on first use: the native kernel needs none
        nd = metadata.num_decodes
        device = metadata.block_tables.device
        prefills = []
        for s in range(nd, metadata.num_seqs):
            start, end = metadata.query_start_loc[s], metadata.query_start_loc[s + 1]
            seq_len = metadata.seq_lens_list[s]
            query_len = end - start
            if seq_len == query_len:
                prefills.append((start, end, None, None))
            elif device.type == "cpu" and query_len <= NATIVE_CHUNK_MAX_TOKENS:
                prefills.append((start, end, s, None))  # its index: attend() decides the path
            else:
                slots, mask = self._context_slots(metadata, s), None
                if device.type != "cpu":
                    # Query i sits at position seq_len - query_len + i and sees keys up to it
                    # (on a CPU without a mask: _chunk_after_context).
                    key_pos = torch.arange(seq_len, device=device)
                    query_pos = torch.arange(seq_len - query_len, seq_len, device=device)
                    mask = key_pos[None, :] <= query_pos[:, None]
                prefills.append((start, end, slots, mask))
        state["prefills"] = prefills

    @staticmethod
    def _context_slots(metadata: AttentionMetadata, s: int) -> torch.Tensor:
        """The cache slot of each of sequence ``s``'s positions, [seq_len]."""
        bs, seq_len = metadata.block_size, metadata.seq_lens_list[s]
        offsets = torch.arange(bs, device=metadata.block_tables.device)
        slots = (metadata.block_tables[s, : -(-seq_len // bs), None] * bs + offsets).reshape(-1)
        return slots[:seq_len]

    @staticmethod
    def _decode_groups(metadata: AttentionMetadata) -> list:
        """Gather indices and masks of the decodes, grouped by length (once per step)."""
        state = metadata.backend_state
        if state["decode_groups"] is not None:
            return state["decode_groups"]
        bs = metadata.block_size
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
                # Whether its blocks are consecutive is decided here, once for every layer.
                table = tables[0]
                n = table.numel()
                consecutive = n == 1 or bool((table[1:] - table[:-1] == 1).all())
                where = slice(int(table[0]), int(table[0]) + n) if consecutive else table
                groups.append((start, end, (where, max_len), None))
                continue
            # [group, num_blocks * block_size] slot of every context position
            slots = (tables[:, :, None] * bs + offsets).reshape(end - start, -1)
            positions = torch.arange(num_blocks * bs, device=device)
            # [group, 1, 1, max_len] True where the position holds context
            mask = positions[None, :] < metadata.seq_lens[start:end, None]
            groups.append((start, end, slots, mask[:, None, None, :]))
        state["decode_groups"] = groups
        return groups

    def write_kv(self, key, value, k_cache, v_cache, metadata):
        ops = cpu_ops(key)
        if ops is not None and k_cache.dtype == value.dtype == key.dtype:
            ops.write_kv(key, value, k_cache, v_cache, metadata.slot_mapping)
            return
        num_kv_heads, head_dim = key.shape[1], key.shape[2]
        slots = metadata.slot_mapping
        k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slots, key)
        v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slots, value)

    def attend(self, query, key, value, k_cache, v_cache, metadata, scale):
        num_kv_heads, head_dim = key.shape[1], key.shape[2]
        state = metadata.backend_state
        nd = metadata.num_decodes
        ops = cpu_ops(query) if nd else None
        if ops is not None and k_cache.dtype == query.dtype:
            decoded = ops.paged_decode_attention(
                query[:nd].contiguous(),
                k_cache,
                v_cache,
                metadata.block_tables,
                metadata.seq_lens,
                scale,
            )
            if nd == metadata.num_seqs:
                return decoded
            out = torch.empty_like(query)
            out[:nd] = decoded
        else:
            out = torch.empty_like(query)
            self._decode_attention(query, k_cache, v_cache, metadata, scale, out)
        k_flat = k_cache.view(-1, num_kv_heads, head_dim)
        v_flat = v_cache.view(-1, num_kv_heads, head_dim)
        # Batched [1, heads, len, head_dim] operands: on a CPU, SDPA's flash kernel takes only
        # 4-D inputs and 3-D ones fall back to its unfused math path, 5 to 20 times slower
        # for prompts of 250 to 2,000 tokens.
        checkpoint = metadata.checkpoint
        native = cpu_ops(query) if k_cache.dtype == query.dtype else None
        for i, (start, end, slots, mask) in enumerate(state["prefills"]):
            if i and checkpoint is not None:  # another step may run here (step_preemption.py)
                checkpoint()
            if isinstance(slots, int):  # a short chunk after context, on a CPU
                seq_len = metadata.seq_lens_list[slots]
                if native is not None:
                    out[start:end] = native.paged_prefill_attention(
                        query[start:end], k_cache, v_cache, metadata.block_tables[slots],
                        seq_len, scale,
                    )  # fmt: skip
                    continue
                slots = self._context_slots(metadata, slots)
            q = query[start:end].transpose(0, 1)[None]  # [1, heads, query_len, head_dim]
            if slots is None:
                k = key[start:end].transpose(0, 1)[None]
                v = value[start:end].transpose(0, 1)[None]
                o = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, scale=scale, enable_gqa=True
                )
            elif mask is None:
                context = slots[: slots.numel() - (end - start)]
                k, v = key[start:end], value[start:end]
                o = _chunk_after_context(q, k, v, k_flat[context], v_flat[context], scale)
            else:
                k = k_flat[slots].transpose(0, 1)[None]  # [1, kv_heads, seq_len, head_dim]
                v = v_flat[slots].transpose(0, 1)[None]
                o = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
                )
            out[start:end] = o[0].transpose(0, 1)
        return out

    def _decode_attention(self, query, k_cache, v_cache, metadata, scale, out) -> None:
        """The PyTorch decode path: gathered K/V per length group, masked SDPA."""
        num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
        k_flat = k_cache.view(-1, num_kv_heads, head_dim)
        v_flat = v_cache.view(-1, num_kv_heads, head_dim)
        for start, end, slots, mask in self._decode_groups(metadata):
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


_flash_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def _chunk_after_context(q, key, value, context_key, context_value, scale):
    """A prompt chunk that follows cached context, on a CPU: [1, heads, query_len, head_dim].

    Every query sees all of the context and its own chunk causally. With one boolean mask over
    [query_len, seq_len] the CPU flash kernel computes every masked block and converts the mask
    to floats first (2.3 ms of a 19 ms step of 2,048 prompt tokens on the tiny model). Here the
    two parts run unmasked, the context in full and the chunk's own fresh K/V with
    ``is_causal``, which skips the blocks above the diagonal; their outputs are merged by their
    log-sum-exps, which is the softmax over the union. With SmolLM2-135M's heads (9 query, 3
    KV, 64 wide) on 2 cores: 9 to 21% less time for 512-token chunks after 512 to 1,536 of
    context, 30 to 34% for 2,048-token chunks after 2,048 to 6,144 (2026-11-25, AMD EPYC)."""
    _, num_heads, query_len, head_dim = q.shape
    kv_heads = key.shape[1]
    group = num_heads // kv_heads

    def kv(t, repeat: int):  # [len, kv_heads, head_dim] -> [1, kv_heads * repeat, len, head_dim]
        t = t.transpose(0, 1)[None]
        return t.repeat_interleave(repeat, dim=1) if repeat > 1 else t

    own, own_lse = _flash_cpu(q, kv(key, group), kv(value, group), is_causal=True, scale=scale)
    # Unmasked, the context needs no copy per query head: the queries that share a KV head
    # (heads kv * group ... kv * group + group - 1) are stacked as one longer query of it.
    stacked = q.reshape(1, kv_heads, group * query_len, head_dim)
    ctx, ctx_lse = _flash_cpu(stacked, kv(context_key, 1), kv(context_value, 1), scale=scale)
    ctx = ctx.reshape(1, num_heads, query_len, head_dim)
    ctx_lse = ctx_lse.reshape(1, num_heads, query_len)
    top = torch.maximum(own_lse, ctx_lse)
    own_w = (own_lse - top).exp()[..., None]
    ctx_w = (ctx_lse - top).exp()[..., None]
    merged = (own.float() * own_w + ctx.float() * ctx_w) / (own_w + ctx_w)
    return merged.to(q.dtype)


def _single_sequence(k_cache, v_cache, blocks: slice | torch.Tensor, length: int):
    """K and V of one sequence as [1, kv_heads, length, head_dim], copied as little as may be.

    Consecutive blocks (what a fresh pool gives one stream; ``blocks`` is then a slice) are a
    view of the cache: no copy. Otherwise whole blocks are selected (one index per block_size
    tokens, several times cheaper than indexing every token's slot). Either way the exact
    length needs no mask.
    """
    if isinstance(blocks, slice):
        k, v = k_cache[blocks], v_cache[blocks]
    else:
        k, v = k_cache.index_select(0, blocks), v_cache.index_select(0, blocks)
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
