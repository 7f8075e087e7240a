"""The configuration of an engine process, each object validated when it is built:
EngineConfig (what the engine loads and how it sizes itself) and ServiceSettings (what the
service that runs it on Redis streams needs beyond that, engine/service/)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field

from engine.protocol import new_engine_id, redis_prefix

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICES = ("auto", "cpu", "cuda")


@dataclass(slots=True)
class EngineConfig:
    """What to load and how to size the scheduler and the paged KV cache.

    ``num_gpu_blocks`` fixes the number of KV blocks; when it is None the engine sizes the
    cache itself: from ``gpu_memory_utilization`` on CUDA, from ``cpu_kv_cache_bytes`` on CPU.
    ``max_model_len`` defaults to the checkpoint's ``max_position_embeddings``.
    """

    model: str
    dtype: str = "auto"
    device: str = "auto"
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_loras: int = 4
    max_lora_rank: int = 64
    seed: int = 0
    # Fields below are additions to the shared contract; all have defaults.
    # "fcfs", "priority" (lower value runs first) or "fair" (engine/core/fair_share.py: classes,
    # then a weighted virtual token counter per tenant, then priority inside a tenant).
    scheduling_policy: str = "fcfs"
    # KV budget on CPU when num_gpu_blocks is None; None: PLATFORM_CPU_KVCACHE_SPACE (GiB) if
    # set, else a share of the memory available at start (engine/worker/kv_cache.py).
    cpu_kv_cache_bytes: int | None = None
    attention_backend: str = "auto"  # "auto", "torch" or "triton" (engine.attention.selector)
    # Weight-only quantization of the projections: None, "int8" or "int4" (CPU; see
    # engine/models/quantize.py).
    quantization: str | None = None
    cpu_threads: int | None = None  # torch intra-op threads on CPU; None: torch's default
    # On CPU, every step on ``cpu_threads`` threads, even while other processes use the cores
    # (False: fewer then; engine/worker/host_load.py).
    fixed_cpu_threads: bool = False
    # Under the fair policy, the prompt tokens a step computes when its prompt work comes from
    # two tenants or classes (engine/core/fair_share.py, "Shared steps"); 0: no cap.
    fair_step_tokens: int = 512
    # Under the fair policy, the batch-class requests a step computes while interactive ones
    # arrive (fair_share.py, "Batch beside interactive"); 0: no cap. Alone, batch work uses
    # the whole batch.
    batch_step_seqs: int = 8
    # Under the fair policy on CPU, a short request of a tenant back from idle runs as a step
    # of its own between two layers of the step in flight (engine/core/step_preemption.py).
    step_preemption: bool = True
    # Draft-free speculative decoding (engine/spec_decode/): a step verifies at most
    # num_speculative_tokens drafts, fewer as more sequences decode (one row each, at most
    # num_speculative_tokens + 1 rows), none with over speculative_max_num_seqs running.
    enable_speculative_decoding: bool = True
    num_speculative_tokens: int = 7
    speculative_max_num_seqs: int = 8
    # Async scheduling (engine/async_steps.py): the next step is scheduled and queued while
    # the device computes this one. None: on with a CUDA device, where the host's work would
    # otherwise leave the GPU idle; on a CPU the host is the device and nothing overlaps.
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a non-empty path to a Hugging Face checkpoint")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        if self.device not in _DEVICES:
            raise ValueError(f"device must be one of {', '.join(_DEVICES)}, got {self.device!r}")
        _positive_int("block_size", self.block_size)
        if self.num_gpu_blocks is not None:
            _positive_int("num_gpu_blocks", self.num_gpu_blocks)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.max_model_len is not None:
            _positive_int("max_model_len", self.max_model_len)
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        if self.max_num_batched_tokens < self.max_num_seqs and not self.enable_chunked_prefill:
            # Without chunking a step must fit one whole prompt; fewer tokens than sequences
            # would also starve decodes. Mirrors vLLM's check.
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs}) when chunked prefill is disabled"
            )
        _positive_int("max_loras", self.max_loras)
        _positive_int("max_lora_rank", self.max_lora_rank)
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.scheduling_policy not in ("fcfs", "priority", "fair"):
            raise ValueError(
                "scheduling_policy must be 'fcfs', 'priority' or 'fair', "
                f"got {self.scheduling_policy!r}"
            )
        if self.cpu_kv_cache_bytes is not None:
            _positive_int("cpu_kv_cache_bytes", self.cpu_kv_cache_bytes)
        if self.cpu_threads is not None:
            _positive_int("cpu_threads", self.cpu_threads)
        if self.quantization not in (None, "int8", "int4"):
            raise ValueError(
                f"quantization must be 'int8', 'int4' or None, got {self.quantization!r}"
            )
        if not isinstance(self.fair_step_tokens, int) or self.fair_step_tokens < 0:
            raise ValueError(f"fair_step_tokens must be >= 0, got {self.fair_step_tokens!r}")
        if not isinstance(self.batch_step_seqs, int) or self.batch_step_seqs < 0:
            raise ValueError(f"batch_step_seqs must be >= 0, got {self.batch_step_seqs!r}")
        _positive_int("num_speculative_tokens", self.num_speculative_tokens)
        _positive_int("speculative_max_num_seqs", self.speculative_max_num_seqs)
        if self.attention_backend not in ("auto", "torch", "triton"):
            raise ValueError(
                "attention_backend must be 'auto', 'torch' or 'triton', "
                f"got {self.attention_backend!r}"
            )

    def check_schedulable(self, *, num_blocks: int, max_model_len: int) -> None:
        """ValueError unless a sequence of max_model_len tokens fits the KV cache and a step."""
        if num_blocks * self.block_size < max_model_len:
            raise ValueError(
                f"the KV cache ({num_blocks} blocks of {self.block_size} tokens) cannot hold "
                f"one sequence of max_model_len={max_model_len} tokens; raise num_gpu_blocks "
                "or lower max_model_len"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_model_len ({max_model_len}) when chunked prefill is disabled, or long "
                "prompts could never be scheduled"
            )


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(slots=True)
class ServiceSettings:
    """Where to read and write, and how the service paces itself. ``max_queued``: the
    backpressure bound (EngineService.room); None: a quarter of ``max_num_seqs``, at least 16.
    ``fair_lookahead``: under the fair policy and with ``max_queued`` None, how many requests
    more the reader may take at least, so the scheduler sees past one tenant's backlog in the
    stream (they are claimed like any other: pending under this engine, recovered if it dies);
    more with many frontends sending (engine/service/read_ahead.py).
    """

    model_name: str
    redis_url: str = field(
        default_factory=lambda: os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    prefix: str = field(default_factory=redis_prefix)
    engine_id: str = field(default_factory=new_engine_id)
    status_interval: float = 1.0
    status_ttl: float = 5.0
    drain_timeout: float = 30.0
    max_queued: int | None = None
    adapter_sync_interval: float = 2.0
    fair_lookahead: int = 256
    # Publish the prefix cache's block hashes, so the API routes requests here by prefix.
    prefix_routing: bool = True
    # The engine process's nice value (engine/process_priority.py); None: CPU_ENGINE_NICE on a
    # CPU device, where the engine shares the cores with the API and Redis, else unchanged.
    nice: int | None = None

    def __post_init__(self) -> None:
        if not self.model_name or ":" in self.engine_id:
            raise ValueError("model_name must be set and engine_id must not contain ':'")
        if self.status_interval <= 0 or self.status_ttl <= self.status_interval:
            raise ValueError(
                f"status_ttl ({self.status_ttl}) must exceed status_interval "
                f"({self.status_interval}), both positive"
            )
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {self.drain_timeout}")
        if self.max_queued is not None and self.max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {self.max_queued}")
        if self.fair_lookahead < 0:
            raise ValueError(f"fair_lookahead must be >= 0, got {self.fair_lookahead}")
        if self.adapter_sync_interval <= 0:
            raise ValueError(f"adapter_sync_interval must be > 0, got {self.adapter_sync_interval}")
        if self.nice is not None and not 0 <= self.nice <= 19:
            raise ValueError(f"nice must be between 0 and 19, got {self.nice}")

    @classmethod
    def from_args(cls, args: argparse.Namespace, model_name: str) -> ServiceSettings:
        """The options given on the command line; the defaults above for the rest."""
        given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}
        given["model_name"] = model_name
        return cls(**{name: value for name, value in given.items() if value is not None})
