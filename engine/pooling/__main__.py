"""``python -m engine.pooling``: serve an embedding model (default all-MiniLM-L6-v2) or a
cross-encoder over Redis."""

from __future__ import annotations

import argparse
import logging
import os
import signal

from engine.pooling.runner import PoolingRunner, default_model_path
from engine.pooling.service import PoolingService
from engine.startup_heap import freeze_startup_heap


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-path", default=None, help="sentence-transformers checkpoint")
    parser.add_argument("--model-name", default="all-MiniLM-L6-v2")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    runner = PoolingRunner(args.model_path or default_model_path(), device=args.device)
    service = PoolingService(runner, model_name=args.model_name, redis_url=args.redis_url)
    freeze_startup_heap()
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    signal.signal(signal.SIGINT, lambda *_: service.stop())
    service.run()


if __name__ == "__main__":
    main()
