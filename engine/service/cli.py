"""What ``python -m engine`` (engine/__main__.py) and ``manage.py run_engine`` share: the
service's options, ServiceSettings (what an engine service needs beyond the engine's own
EngineConfig) and ``serve``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from dataclasses import dataclass, field

from engine.args import add_engine_arguments
from engine.protocol import new_engine_id, redis_prefix

logger = logging.getLogger("engine.service")


@dataclass(slots=True)
class ServiceSettings:
    """Where to read and write, and how the service paces itself. ``max_queued``: the
    backpressure bound (EngineService.room); None: a quarter of ``max_num_seqs``, at least 16.
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
            raise ValueError(f"adapter_sync_interval must be > 0, got {self.adapter_sync_interval}")

    @classmethod
    def from_args(cls, args: argparse.Namespace, model_name: str) -> ServiceSettings:
        """The options given on the command line; the defaults above for the rest."""
        given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}
        given["model_name"] = model_name
        return cls(**{name: value for name, value in given.items() if value is not None})


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's options and the service's; shared with ``manage.py run_engine``. The
    service's defaults are ServiceSettings' (an option left out stays None)."""
    add_engine_arguments(parser)
    parser.add_argument("--redis-url", help="default: $REDIS_URL, else redis://127.0.0.1:6379/0")
    parser.add_argument("--engine-id", help="default: host-pid-random")
    parser.add_argument("--max-queued", type=int, help="read requests only while fewer wait here")
    parser.add_argument("--status-interval", type=float, help="default 1 s")
    parser.add_argument("--status-ttl", type=float, help="default 5 s")
    parser.add_argument("--drain-timeout", type=float, help="default 30 s")
    parser.add_argument("--adapter-sync-interval", type=float, help="default 2 s")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))


def serve(args: argparse.Namespace, *, model_path: str, model_name: str) -> int:
    """Load the engine and run the service in the foreground; returns an exit code."""
    from engine.args import engine_config_from_args
    from engine.llm_engine import LLMEngine
    from engine.service.loop import EngineService

    try:
        settings = ServiceSettings.from_args(args, model_name)
        config = engine_config_from_args(args, model_path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logger.info("loading %s for %r", model_path, model_name)
    EngineService(LLMEngine(config), settings).run()
    return 0
