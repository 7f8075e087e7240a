"""Argument checks shared by the paged-attention wrappers (decode and prefill)."""

from __future__ import annotations

import torch

from kernels.validation import (
    FLOAT_DTYPES,
    check_contiguous,
    check_dim,
    check_dtype,
    check_last_dim_contiguous,
    check_ndim,
    check_same_device,
    check_same_dtype,
)


def check_paged_attention_args(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> None:
    """Checks common to both kernels: layouts, dtypes, head counts and devices."""
    check_ndim("query", query, 3, "[num_tokens, num_heads, head_dim]")
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    check_ndim("key_cache", key_cache, 4, layout)
    check_ndim("value_cache", value_cache, 4, layout)
    check_ndim("block_tables", block_tables, 2, "[num_seqs, max_blocks_per_seq]")
    check_ndim("seq_lens", seq_lens, 1, "[num_seqs]")
    check_dtype("query", query, FLOAT_DTYPES)
    check_same_dtype(["query", "key_cache", "value_cache"], [query, key_cache, value_cache])
    check_dtype("block_tables", block_tables, (torch.int32,))
    check_dtype("seq_lens", seq_lens, (torch.int32,))
    if key_cache.shape != value_cache.shape:
        raise ValueError(
            f"key_cache and value_cache must have one shape; got {tuple(key_cache.shape)} "
            f"and {tuple(value_cache.shape)}"
        )
    num_heads, num_kv_heads = query.shape[1], key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"query heads ({num_heads}) must be a multiple of the cache's KV heads ({num_kv_heads})"
        )
    check_dim("key_cache", key_cache, 3, query.shape[2], "head_dim, as in query")
    check_dim("block_tables", block_tables, 0, seq_lens.shape[0], "num_seqs, as in seq_lens")
    if not scale > 0:
        raise ValueError(f"scale must be positive; got {scale}")
    check_last_dim_contiguous("query", query)
    check_contiguous("key_cache", key_cache)
    check_contiguous("value_cache", value_cache)
    check_last_dim_contiguous("block_tables", block_tables)
    check_contiguous("seq_lens", seq_lens)
    check_same_device(
        ["query", "key_cache", "value_cache", "block_tables", "seq_lens"],
        [query, key_cache, value_cache, block_tables, seq_lens],
    )
