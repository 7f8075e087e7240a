"""Reference attention over the paged KV cache: prefill chunks and single-token decodes.

Both read every key and value from the cache (the step's new K and V are written there first by
``reshape_and_cache``), so a prefix-cached or chunked prefill and a decode are the same problem:
the queries of sequence i are its last ``q_len`` positions and attend causally to all
``seq_lens[i]`` cached tokens. The math runs in float32 (or wider) and rounds once at the end.
"""

from __future__ import annotations

import torch


def _gather_sequence_kv(
    cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> torch.Tensor:
    # cache: [num_blocks, block_size, num_kv_heads, head_dim] -> [seq_len, num_kv_heads, head_dim]
    block_size = cache.shape[1]
    num_blocks = -(-seq_len // block_size)
    blocks = cache[block_table[:num_blocks].long()]
    return blocks.reshape(-1, cache.shape[2], cache.shape[3])[:seq_len]


def paged_prefill_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_query_len: int,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its whole cached context.

    query:                  [num_tokens, num_heads, head_dim], sequences back to back
    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables:           [num_seqs, max_blocks_per_seq] int32
    query_start_loc:        [num_seqs + 1] int32, cumulative query lengths starting at 0
    seq_lens:               [num_seqs] int32, context length including the new tokens
    max_query_len:          the longest query length (sizes the Triton grid; unused here)
    returns                 [num_tokens, num_heads, head_dim] in query's dtype
    """
    del max_query_len
    num_heads, num_kv_heads = query.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(query)
    compute_dtype = torch.promote_types(query.dtype, torch.float32)
    starts = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        q_start, q_end = starts[i], starts[i + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        q = query[q_start:q_end].to(compute_dtype).transpose(0, 1)  # [num_heads, q_len, head_dim]
        k = _gather_sequence_kv(key_cache, block_tables[i], seq_len).to(compute_dtype)
        v = _gather_sequence_kv(value_cache, block_tables[i], seq_len).to(compute_dtype)
        k = k.transpose(0, 1).repeat_interleave(group, dim=0)  # [num_heads, seq_len, head_dim]
        v = v.transpose(0, 1).repeat_interleave(group, dim=0)
        scores = torch.matmul(q, k.transpose(1, 2)) * scale  # [num_heads, q_len, seq_len]
        query_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)
        key_pos = torch.arange(seq_len, device=query.device)
        scores.masked_fill_(key_pos[None, :] > query_pos[:, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[q_start:q_end] = torch.matmul(probs, v).transpose(0, 1).to(query.dtype)
    return out


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_seq_len: int,
    partition_size: int | None = None,
) -> torch.Tensor:
    """One new token per sequence attending to its whole cached context.

    query:                  [num_seqs, num_heads, head_dim]
    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables:           [num_seqs, max_blocks_per_seq] int32
    seq_lens:               [num_seqs] int32, context length including the new token
    max_seq_len:            an upper bound on seq_lens (sizes the Triton grid)
    partition_size:         tokens per partition in the Triton kernel, None: its choice
                            (no effect here)
    returns                 [num_seqs, num_heads, head_dim] in query's dtype
    """
    del partition_size
    num_seqs = query.shape[0]
    query_start_loc = torch.arange(num_seqs + 1, dtype=torch.int32, device=query.device)
    return paged_prefill_attention(
        query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, 1
    )
