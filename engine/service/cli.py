"""What ``python -m engine`` (engine/__main__.py) and ``manage.py run_engine`` share: the
service's options, which build a ServiceSettings (engine/config.py), and ``serve``."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from engine.args import add_engine_arguments, engine_config_from_args
from engine.config import ServiceSettings
from engine.process_priority import CPU_ENGINE_NICE, yield_cpu

logger = logging.getLogger("engine.service")


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's options and the service's; shared with ``manage.py run_engine``. The
    service's defaults are ServiceSettings' (an option left out stays None)."""
    add_engine_arguments(parser)
    parser.add_argument("--redis-url", help="default: $REDIS_URL, else redis://127.0.0.1:6379/0")
    parser.add_argument("--engine-id", help="default: host-pid-random")
    parser.add_argument(
        "--max-queued",
        type=int,
        help="read requests only while fewer wait here (default: max(16, max-num-seqs/4), "
        "plus --fair-lookahead under the fair policy)",
    )
    parser.add_argument(
        "--fair-lookahead",
        type=int,
        help="fair policy, default --max-queued: requests read beyond that bound, so the "
        "scheduler sees other tenants behind one tenant's backlog (default 256; grows to 32 per "
        "API process sending to the model past eight of them)",
    )
    parser.add_argument(
        "--no-prefix-routing",
        dest="prefix_routing",
        action="store_const",
        const=False,
        help="publish no prefix index: the API's router never sends requests here for their "
        "cached prefix, only through the shared stream",
    )
    parser.add_argument(
        "--nice",
        type=int,
        help="lower the engine's CPU priority to this nice value (and its autogroup's), so "
        "that the API, Redis and the rest of the host run first when they need a core: "
        f"0-19, default {CPU_ENGINE_NICE} on a CPU device, 0 (unchanged) on a GPU",
    )
    parser.add_argument("--status-interval", type=float, help="default 1 s")
    parser.add_argument("--status-ttl", type=float, help="default 5 s")
    parser.add_argument("--drain-timeout", type=float, help="default 30 s")
    parser.add_argument("--adapter-sync-interval", type=float, help="default 2 s")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))


def serve(args: argparse.Namespace, *, model_path: str, model_name: str) -> int:
    """Load the engine and run the service in the foreground; returns an exit code."""
    from engine.llm_engine import LLMEngine
    from engine.service.loop import EngineService
    from engine.startup_heap import freeze_startup_heap

    try:
        settings = ServiceSettings.from_args(args, model_name)
        config = engine_config_from_args(args, model_path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logger.info("loading %s for %r", model_path, model_name)
    engine = LLMEngine(config)
    yield_cpu(engine.device.type, settings.nice)
    service = EngineService(engine, settings)
    freeze_startup_heap()  # the model is loaded: full collections skip what it holds
    service.run()
    return 0
