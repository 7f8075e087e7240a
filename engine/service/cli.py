"""``python -m engine`` (and ``manage.py run_engine``): the command line and ServiceSettings,
what an engine service needs beyond the engine's own EngineConfig."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass, field

from engine.protocol import new_engine_id, redis_prefix

logger = logging.getLogger("engine.service")


@dataclass(slots=True)
class ServiceSettings:
    """Where to read and write, and how the service paces itself.

    ``max_queued`` is the backpressure bound: the service reads more requests from Redis only
    while fewer than this many wait in its scheduler (or its inbox), so the rest stay in the
    stream for other replicas. None: a quarter of ``max_num_seqs``, at least 16.
    ``adapter_sync_interval``: how often the adapter registry is read again and reconciled.
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
        if self.adapter_sync_interval <= 0:
            raise ValueError(
                f"adapter_sync_interval must be positive, got {self.adapter_sync_interval}"
            )

    def queued_bound(self, max_num_seqs: int) -> int:
        return self.max_queued if self.max_queued is not None else max(16, max_num_seqs // 4)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine",
        description="Serve a Hugging Face checkpoint from the platform's Redis request stream.",
    )
    parser.add_argument("--model-path", required=True, help="checkpoint directory")
    parser.add_argument("--model-name", required=True, help="served model name (stream name)")
    add_service_arguments(parser)
    return parser


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``manage.py run_engine``."""
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--engine-id", default=None, help="default: host-pid-random")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--num-gpu-blocks", type=int, default=None, help="fix the KV cache size")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument(
        "--quantization",
        default=None,
        choices=["int8", "int4"],
        help="weight-only quantized projections (CPU); default: the served model's setting",
    )
    parser.add_argument(
        "--cpu-kv-cache-space",
        type=float,
        default=None,
        help="GiB for the KV cache on CPU (default: $PLATFORM_CPU_KVCACHE_SPACE, else 10%% of "
        "available memory, at most 4)",
    )
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="torch intra-op threads on CPU (default: torch's, one per core)",
    )
    parser.add_argument(
        "--scheduling-policy",
        default="fcfs",
        choices=["fcfs", "priority"],
        help="priority: lower `priority` first (Batch API lines send a high value)",
    )
    parser.add_argument(
        "--max-queued",
        type=int,
        default=None,
        help="read more requests only while fewer wait here (default max(16, max_num_seqs/4))",
    )
    parser.add_argument("--status-interval", type=float, default=1.0)
    parser.add_argument("--status-ttl", type=float, default=5.0)
    parser.add_argument("--drain-timeout", type=float, default=30.0)
    parser.add_argument(
        "--adapter-sync-interval",
        type=float,
        default=2.0,
        help="seconds between reconciles of the loaded adapters with the registry",
    )
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))


def settings_from_args(args: argparse.Namespace, model_name: str) -> ServiceSettings:
    extra = {"engine_id": args.engine_id} if args.engine_id else {}
    if args.redis_url:
        extra["redis_url"] = args.redis_url
    return ServiceSettings(
        model_name=model_name,
        status_interval=args.status_interval,
        status_ttl=args.status_ttl,
        drain_timeout=args.drain_timeout,
        max_queued=args.max_queued,
        adapter_sync_interval=args.adapter_sync_interval,
        **extra,
    )


def engine_config_from_args(args: argparse.Namespace, model_path: str):
    from engine.config import EngineConfig

    return EngineConfig(
        model=str(model_path),
        dtype=args.dtype,
        device=args.device,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_prefix_caching=not args.no_prefix_caching,
        scheduling_policy=getattr(args, "scheduling_policy", "fcfs"),
        quantization=getattr(args, "quantization", None),
        cpu_kv_cache_bytes=_gib_to_bytes(getattr(args, "cpu_kv_cache_space", None)),
        cpu_threads=getattr(args, "cpu_threads", None),
    )


def _gib_to_bytes(gib: float | None) -> int | None:
    if gib is None:
        return None
    if gib <= 0:
        raise ValueError(f"--cpu-kv-cache-space must be a positive number of GiB, got {gib}")
    return int(gib * 2**30)


def serve(args: argparse.Namespace, *, model_path: str, model_name: str) -> int:
    """Load the engine and run the service in the foreground; returns an exit code."""
    from engine.llm_engine import LLMEngine
    from engine.service.loop import EngineService

    try:
        settings = settings_from_args(args, model_name)
        config = engine_config_from_args(args, model_path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logger.info("loading %s for %r", model_path, model_name)
    engine = LLMEngine(config)
    EngineService(engine, settings).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return serve(args, model_path=args.model_path, model_name=args.model_name)
