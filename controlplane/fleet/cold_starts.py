"""Cold starts counted per model in Redis, for /metrics (``controlplane/metrics/cold_start.py``
renders them) and kept fleet-wide like the request metrics: whichever agent's reconciler pass
sees a woken deployment's replica ready adds it here, and every API process's /metrics reads
the same totals.

Layout, under ``{prefix}:fleet:``: ``cold_start_models`` (set of model names) and
``cold_starts:{model}`` (hash): ``count``, ``sum`` (seconds), and ``le:{bound}`` the number of
cold starts that fell in that bucket and in no lower one (the reader makes them cumulative).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import redis

from controlplane.common.redis_clients import redis_key

# Seconds from a wake to a ready replica: a tiny model loads in seconds, a large one on a slow
# disk in minutes; past the API's wait (FLEET_WAKE_TIMEOUT_S, 300 s) only +Inf is left.
COLD_START_BUCKETS = (
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
)  # fmt: skip


def _models_key() -> str:
    return redis_key("fleet", "cold_start_models")


def _tally_key(model: str) -> str:
    return redis_key("fleet", "cold_starts", model)


def _bound_field(seconds: float) -> str:
    index = bisect_left(COLD_START_BUCKETS, seconds)  # a value equal to a bound is in it (le)
    bound = COLD_START_BUCKETS[index] if index < len(COLD_START_BUCKETS) else math.inf
    return f"le:{bound!r}"


def cold_start_record(client: redis.Redis, model: str, seconds: float) -> None:
    """Count one cold start of ``model`` that took ``seconds`` (one MULTI: all or nothing)."""
    seconds = max(0.0, float(seconds))
    with client.pipeline(transaction=True) as pipe:
        pipe.sadd(_models_key(), model)
        pipe.hincrby(_tally_key(model), "count", 1)
        pipe.hincrbyfloat(_tally_key(model), "sum", seconds)
        pipe.hincrby(_tally_key(model), _bound_field(seconds), 1)
        pipe.execute()


@dataclass(frozen=True)
class ColdStartTally:
    model: str
    count: int
    total_seconds: float
    # (upper bound, cold starts at or below it), COLD_START_BUCKETS then +Inf: cumulative.
    cumulative: list[tuple[float, int]]


def cold_start_tallies(client: redis.Redis) -> list[ColdStartTally]:
    """Every model's cold starts so far, by model name."""
    models = sorted(m.decode() for m in client.smembers(_models_key()))
    if not models:
        return []
    with client.pipeline(transaction=False) as pipe:
        for model in models:
            pipe.hgetall(_tally_key(model))
        hashes = pipe.execute()
    bounds = (*COLD_START_BUCKETS, math.inf)
    tallies = []
    for model, raw in zip(models, hashes, strict=True):
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        if not fields:
            continue
        per_bucket = [0] * len(bounds)
        for name, value in fields.items():
            if name.startswith("le:"):
                # A bound no longer in the list counts in the first one above it.
                per_bucket[bisect_left(bounds, float(name[3:]))] += int(value)
        running, cumulative = 0, []
        for bound, n in zip(bounds, per_bucket, strict=True):
            running += n
            cumulative.append((bound, running))
        tallies.append(
            ColdStartTally(
                model=model,
                count=int(fields.get("count", "0")),
                total_seconds=float(fields.get("sum", "0")),
                cumulative=cumulative,
            )
        )
    return tallies
