"""Sizing and allocating the paged KV cache (layout documented in engine.attention.backend)."""

from __future__ import annotations

import logging

import torch

from engine.config import EngineConfig
from engine.model_config import ModelConfig

logger = logging.getLogger(__name__)


def bytes_per_block(model_config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * model_config.num_key_value_heads * model_config.head_dim * elem
    return per_token * block_size * model_config.num_hidden_layers


def num_blocks_for(
    config: EngineConfig,
    model_config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    free_bytes: int | None = None,
) -> int:
    """KV blocks to allocate: ``num_gpu_blocks`` if set, else what the memory budget holds.

    On CPU the budget is ``cpu_kv_cache_bytes``, capped at what ``max_num_seqs`` sequences of
    ``max_model_len`` tokens could ever use. On CUDA it is ``free_bytes`` (memory left under
    ``gpu_memory_utilization`` after weights and peak activations, measured by the runner).
    """
    if config.num_gpu_blocks is not None:
        return config.num_gpu_blocks
    per_block = bytes_per_block(model_config, config.block_size, dtype)
    if device.type == "cpu":
        budget = config.cpu_kv_cache_bytes
        needed = -(-config.max_num_seqs * model_config.max_model_len // config.block_size)
        num = min(budget // per_block, needed)
    else:
        num = max(0, int(free_bytes or 0)) // per_block
    min_blocks = -(-model_config.max_model_len // config.block_size)
    if num < min_blocks:
        raise ValueError(
            f"the KV cache budget holds {num} blocks but one sequence of max_model_len="
            f"{model_config.max_model_len} needs {min_blocks}; lower max_model_len or give "
            "the cache more memory"
        )
    return int(num)


def allocate_kv_caches(
    model_config: ModelConfig,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (K, V), each [num_blocks, block_size, num_kv_heads, head_dim], zeroed.

    Zeroed, not empty: padded decode attention multiplies masked positions by 0, and 0 * NaN
    from uninitialised memory would poison the output.
    """
    shape = (2, num_blocks, block_size, model_config.num_key_value_heads, model_config.head_dim)
    caches = []
    for _ in range(model_config.num_hidden_layers):
        kv = torch.zeros(shape, dtype=dtype, device=device)
        caches.append((kv[0], kv[1]))
    logger.info(
        "KV cache: %d blocks x %d tokens (%.1f MiB)",
        num_blocks,
        block_size,
        num_blocks * bytes_per_block(model_config, block_size, dtype) / 2**20,
    )
    return caches
