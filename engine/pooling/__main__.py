"""``python -m engine.pooling``: serve an embedding model (default all-MiniLM-L6-v2) or a
cross-encoder over Redis."""

from __future__ import annotations

import argparse
import logging
import os
import signal

from engine.pooling.runner import PoolingRunner, default_model_path
from engine.pooling.service import PoolingService
from engine.process_priority import CPU_ENGINE_NICE, yield_cpu
from engine.startup_heap import freeze_startup_heap


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-path", default=None, help="sentence-transformers checkpoint")
    parser.add_argument("--model-name", default="all-MiniLM-L6-v2")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--engine-id",
        default=None,
        help="this engine's name in Redis (a node agent names each attempt); default: a new one",
    )
    parser.add_argument(
        "--cpu-threads", type=int, default=None, help="torch threads on CPU (default: torch's)"
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=None,
        help="lower the engine's CPU priority to this nice value, as a generation engine's "
        f"--nice: default {CPU_ENGINE_NICE} on a CPU device, unchanged on a GPU",
    )
    args = parser.parse_args(argv)
    if args.cpu_threads is not None:
        if args.cpu_threads < 1:
            parser.error(f"--cpu-threads must be at least 1, got {args.cpu_threads}")
        import torch

        torch.set_num_threads(args.cpu_threads)
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    runner = PoolingRunner(args.model_path or default_model_path(), device=args.device)
    yield_cpu("cuda" if args.device.startswith("cuda") else "cpu", args.nice)
    service = PoolingService(
        runner, model_name=args.model_name, redis_url=args.redis_url, engine_id=args.engine_id
    )
    freeze_startup_heap()
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    signal.signal(signal.SIGINT, lambda *_: service.stop())
    service.run()


if __name__ == "__main__":
    main()
