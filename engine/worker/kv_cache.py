"""Sizing and allocating the paged KV cache (layout documented in engine.attention.backend)."""

from __future__ import annotations

import logging
import math
import mmap
import os

import torch

from engine.config import EngineConfig
from engine.model_config import ModelConfig

logger = logging.getLogger(__name__)


def bytes_per_block(model_config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * model_config.num_key_value_heads * model_config.head_dim * elem
    return per_token * block_size * model_config.num_hidden_layers


# The CPU KV budget, like vLLM's VLLM_CPU_KVCACHE_SPACE: GiB, set per engine.
CPU_KVCACHE_SPACE_ENV = "PLATFORM_CPU_KVCACHE_SPACE"
# Without it: this share of the memory available once the weights are loaded, at most
# _AUTO_CAP. The cache is zeroed, so all of it is resident from the start: a tenth leaves room
# for the API processes, Redis and several engines on one host.
_AUTO_FRACTION = 0.1
_AUTO_CAP = 4 << 30
# ... but never below what one max_model_len sequence needs, nor below 1 GiB (the old fixed
# default), as long as that fits in half of the available memory: a busy or small machine
# still starts the model it was asked to serve.
_AUTO_FLOOR = 1 << 30
_AUTO_FLOOR_SHARE = 0.5


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); total physical memory elsewhere."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_kv_cache_budget(config: EngineConfig, min_bytes: int = 0) -> tuple[int, str]:
    """Bytes the CPU KV cache may take, and where that figure came from (for the log).
    ``min_bytes``: what one sequence of max_model_len needs (the automatic budget's floor)."""
    if config.cpu_kv_cache_bytes is not None:
        return config.cpu_kv_cache_bytes, "engine setting"
    raw = os.environ.get(CPU_KVCACHE_SPACE_ENV, "").strip()
    if raw:
        try:
            gib = float(raw)
        except ValueError:
            gib = 0.0
        if gib <= 0:
            raise ValueError(
                f"{CPU_KVCACHE_SPACE_ENV} must be a positive number of GiB, got {raw!r}"
            )
        return int(gib * 2**30), CPU_KVCACHE_SPACE_ENV
    available = available_memory_bytes()
    budget = min(int(available * _AUTO_FRACTION), _AUTO_CAP)
    floor = min(max(_AUTO_FLOOR, min_bytes), int(available * _AUTO_FLOOR_SHARE))
    if floor > budget:
        return floor, (
            f"at least one max_model_len sequence or 1 GiB, of {available / 2**30:.1f} GiB "
            "available"
        )
    return budget, (
        f"{_AUTO_FRACTION:.0%} of {available / 2**30:.1f} GiB available, "
        f"capped at {_AUTO_CAP / 2**30:.0f} GiB"
    )


def num_blocks_for(
    config: EngineConfig,
    model_config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    free_bytes: int | None = None,
) -> int:
    """KV blocks to allocate: ``num_gpu_blocks`` if set, else what the memory budget holds.

    On CPU the budget is ``cpu_kv_cache_budget`` (the setting, PLATFORM_CPU_KVCACHE_SPACE, or a
    share of available memory), capped at what ``max_num_seqs`` sequences of ``max_model_len``
    tokens could ever use. On CUDA it is ``free_bytes`` (memory left under
    ``gpu_memory_utilization`` after weights and peak activations, measured by the runner).
    """
    if config.num_gpu_blocks is not None:
        return config.num_gpu_blocks
    per_block = bytes_per_block(model_config, config.block_size, dtype)
    min_blocks = -(-model_config.max_model_len // config.block_size)
    if device.type == "cpu":
        budget, source = cpu_kv_cache_budget(config, min_blocks * per_block)
        needed = -(-config.max_num_seqs * model_config.max_model_len // config.block_size)
        num = min(budget // per_block, needed)
        logger.info(
            "CPU KV cache budget %.2f GiB (%s)%s",
            budget / 2**30,
            source,
            "; capped at what max_num_seqs x max_model_len can use" if num == needed else "",
        )
    else:
        num = max(0, int(free_bytes or 0)) // per_block
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
    *,
    report: bool = True,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (K, V), each [num_blocks, block_size, num_kv_heads, head_dim], zeroed;
    ``report``: log its size (not for the memory profile's stand-in on CUDA).

    Zeroed, not empty: padded decode attention multiplies masked positions by 0, and 0 * NaN
    from uninitialised memory would poison the output.
    """
    shape = (2, num_blocks, block_size, model_config.num_key_value_heads, model_config.head_dim)
    caches = []
    for _ in range(model_config.num_hidden_layers):
        kv = _zeros(shape, dtype, device)
        caches.append((kv[0], kv[1]))
    if not report:
        return caches
    logger.info(
        "KV cache: %d blocks x %d tokens = %d tokens, %.2f GiB on %s",
        num_blocks,
        block_size,
        num_blocks * block_size,
        num_blocks * bytes_per_block(model_config, block_size, dtype) / 2**30,
        device,
    )
    return caches


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed tensor; on a CPU, on an anonymous map of its own, whose pages the kernel hands
    out zeroed when first written: the cache becomes resident as sequences fill it, not all at
    start (``torch.zeros`` writes every byte: a server's default budget, a tenth of the free
    memory, would be resident before its first request, one stream's 2,048-token cache
    90 MiB for the 300 tokens it holds)."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    numel = math.prod(shape)
    nbytes = numel * dtype.itemsize
    if nbytes == 0:
        return torch.zeros(shape, dtype=dtype)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)  # fd -1: anonymous memory
    return torch.frombuffer(region, dtype=dtype, count=numel).view(shape)
