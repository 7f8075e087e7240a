"""Readiness probe for engine containers: ``python -m controlplane.metrics.engine_ready``.

An engine serves no HTTP; it is ready once it has loaded its model and publishes its status
record (the same record /metrics and /ready read), and stops being ready when it drains or
stops publishing. Exit status 0: ready; 1: not ready; 2: bad arguments. Reads REDIS_URL and
PLATFORM_REDIS_PREFIX from the environment, imports neither Django nor torch, so a probe
costs a fraction of a second.

    python -m controlplane.metrics.engine_ready --model qwen --engine-id "$POD_NAME"
    python -m controlplane.metrics.engine_ready --model qwen --allow-draining   # liveness
"""

from __future__ import annotations

import argparse
import os
import sys

import redis

from controlplane.common.engine_statuses import find_engine_statuses
from engine import protocol
from engine.protocol import Keys


def find_ready_engine(
    client: redis.Redis,
    keys: Keys,
    *,
    model: str,
    engine_id: str | None,
    allow_draining: bool,
) -> protocol.EngineStatus | None:
    """The status of a live engine of ``model`` (this ``engine_id`` if given), else None."""
    statuses = find_engine_statuses(client, keys, model=model, engine_id=engine_id or None)
    return next((s for s in statuses if allow_draining or not s.draining), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controlplane.metrics.engine_ready")
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--engine-id", default=None, help="this engine's id (default: any)")
    parser.add_argument(
        "--allow-draining", action="store_true", help="a draining engine counts (liveness)"
    )
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    args = parser.parse_args(argv)
    if not args.redis_url:
        print("error: set REDIS_URL or pass --redis-url", file=sys.stderr)
        return 2
    client = redis.Redis.from_url(args.redis_url, socket_timeout=3, socket_connect_timeout=3)
    try:
        status = find_ready_engine(
            client,
            Keys(),
            model=args.model,
            engine_id=args.engine_id,
            allow_draining=args.allow_draining,
        )
    except redis.RedisError as exc:
        print(f"not ready: Redis unreachable ({exc})", file=sys.stderr)
        return 1
    finally:
        client.close()
    if status is None:
        print(f"not ready: no live engine record for model {args.model!r}", file=sys.stderr)
        return 1
    print(f"ready: engine {status.engine_id} serves {status.model!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
