"""Where request-level metrics live in Redis, and how one request's observations are encoded.

Every API process adds its requests to the same Redis hashes, so every process's /metrics
renders the same complete totals: this is the platform's equivalent of prometheus_client's
multiprocess mode, without a shared directory and without losing the counts of processes
that exit.

Layout, under ``{prefix}:metrics:``:

- ``request_series`` (set): one member per label set, ``["model_name", "tenant"]`` as JSON.
- ``request:{member}`` (hash) for that label set:
  - ``success|{finished_reason}``, ``cached_tokens``: counters;
  - ``{histogram}|{le}``: observations that fell in that bucket and in no lower one (the
    collector makes them cumulative); ``{histogram}|count`` and ``{histogram}|sum``.

All increments of one request are applied by one Lua script call (recorder.py; requests of
one process that end together share a call): Redis runs it atomically, so concurrent
processes neither lose nor double count, and a scrape sees a request either entirely or not
at all.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.metrics.definitions import MetricSpec

SEP = "|"


@dataclass(frozen=True, slots=True)
class MetricKeys:
    """Redis key names of the metrics store under one platform prefix."""

    prefix: str

    @property
    def request_series(self) -> str:
        return f"{self.prefix}:metrics:request_series"

    def request_hash(self, member: str) -> str:
        return f"{self.prefix}:metrics:request:{member}"


def series_member(model_name: str, tenant: str) -> str:
    return json.dumps([model_name, tenant], separators=(",", ":"))


def parse_series_member(member: str) -> tuple[str, str]:
    model_name, tenant = json.loads(member)
    return str(model_name), str(tenant)


@dataclass(slots=True)
class HistogramDelta:
    """Observations of one histogram, bucketed locally before they are sent to Redis."""

    spec: MetricSpec
    bucket_counts: dict[str, int] = field(default_factory=dict)
    count: int = 0
    total: float = 0.0

    def observe_many(self, values: Iterable[float]) -> None:
        bounds = self.spec.bucket_bounds
        for value in values:
            value = float(value)
            if not math.isfinite(value):
                # It would poison the sum for good (and Redis refuses to add inf).
                raise ValueError(f"{self.spec.name}: observation {value} is not finite")
            # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
            index = bisect_left(self.spec.buckets, value)
            bound = bounds[index]
            self.bucket_counts[bound] = self.bucket_counts.get(bound, 0) + 1
            self.count += 1
            self.total += value

    def increments(self) -> list[tuple[str, int | float]]:
        if not self.count:
            return []
        name = self.spec.field
        fields: list[tuple[str, int | float]] = [
            (f"{name}{SEP}{bound}", n) for bound, n in self.bucket_counts.items()
        ]
        fields.append((f"{name}{SEP}count", self.count))
        fields.append((f"{name}{SEP}sum", self.total))
        return fields


@dataclass(slots=True)
class StoredHistogram:
    """One histogram of one label set as read back: cumulative buckets, sum and count."""

    cumulative: list[tuple[str, int]]
    count: int
    total: float


class StoredSeries:
    """One label set's hash as read back, its fields grouped by metric in a single pass.

    A scrape reads every label set, so parsing each field once (not once per metric) is
    what keeps scrapes of many tenants cheap.
    """

    __slots__ = ("counters", "groups")

    def __init__(self, raw: dict[bytes, bytes]):
        self.counters: dict[str, str] = {}
        self.groups: dict[str, dict[str, str]] = {}
        for key, value in raw.items():
            name, sep, rest = key.decode().partition(SEP)
            if sep:
                self.groups.setdefault(name, {})[rest] = value.decode()
            else:
                self.counters[name] = value.decode()

    def counter(self, name: str) -> int:
        return int(float(self.counters.get(name, "0")))

    def labelled_counter(self, name: str) -> dict[str, int]:
        """``{label value: count}`` of a counter stored as ``name|label value`` fields."""
        return {k: int(float(v)) for k, v in sorted(self.groups.get(name, {}).items())}

    def histogram(self, spec: MetricSpec) -> StoredHistogram | None:
        """Cumulative buckets for ``spec`` (None when nothing was observed).

        A stored bound the current bucket list lacks (buckets changed between versions) is
        counted in the first current bucket at or above it, which keeps every ``le`` an
        upper bound of what it counts.
        """
        fields = self.groups.get(spec.field)
        if not fields:
            return None
        index = {bound: i for i, bound in enumerate(spec.bucket_bounds)}
        per_bucket = [0] * len(index)
        for bound, value in fields.items():
            if bound in ("count", "sum"):
                continue
            i = index.get(bound)
            if i is None:
                upper = math.inf if bound == "+Inf" else float(bound)
                i = bisect_left(spec.buckets, upper)
            per_bucket[i] += int(value)
        running = 0
        cumulative = []
        for bound, n in zip(spec.bucket_bounds, per_bucket, strict=True):
            running += n
            cumulative.append((bound, running))
        count = int(fields.get("count", "0"))
        return StoredHistogram(
            cumulative=cumulative, count=count, total=float(fields.get("sum", "0"))
        )
