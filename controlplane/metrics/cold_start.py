"""Cold starts of scale-to-zero deployments on /metrics: how many, and how long each took
(from the wake a request caused to a ready replica), per model.

The fleet's reconciler counts them in Redis (``controlplane/fleet/cold_starts.py``) as it sees
a woken deployment's replica ready; this collector renders those fleet-wide totals at scrape
time, so every API process shows the same figures (as the request metrics do). Not vLLM
metrics (vLLM has no scale to zero), hence ``platform:``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from controlplane.common.redis_clients import sync_redis
from controlplane.fleet.cold_starts import COLD_START_BUCKETS, cold_start_tallies
from controlplane.metrics.definitions import MetricSpec
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)

COLD_STARTS = MetricSpec(
    "platform:cold_starts",
    "counter",
    "Cold starts: a request for a model scaled to zero woke its deployment.",
    ("model_name",),
)
COLD_START_SECONDS = MetricSpec(
    "platform:cold_start_seconds",
    "histogram",
    "Seconds from the wake a request caused to a ready replica of the model.",
    ("model_name",),
    buckets=COLD_START_BUCKETS,
)
COLD_START_METRICS = (COLD_STARTS, COLD_START_SECONDS)


class ColdStartCollector(Collector):
    def describe(self) -> list[Metric]:
        # Without describe() the registry would call collect() (and Redis) on registration.
        return [self._counter(), self._histogram()]

    def collect(self) -> Iterator[Metric]:
        counter, histogram = self._counter(), self._histogram()
        try:
            tallies = cold_start_tallies(sync_redis())
        except Exception as exc:  # /metrics must still answer
            warn_failure(logger, exc, "metrics: cannot read cold starts from Redis")
            tallies = []
        for tally in tallies:
            counter.add_metric([tally.model], tally.count)
            buckets = [(floatToGoString(bound), n) for bound, n in tally.cumulative]
            histogram.add_metric([tally.model], buckets, tally.total_seconds)
        yield counter
        yield histogram

    @staticmethod
    def _counter() -> CounterMetricFamily:
        spec = COLD_STARTS
        return CounterMetricFamily(spec.name, spec.documentation, labels=list(spec.labels))

    @staticmethod
    def _histogram() -> HistogramMetricFamily:
        spec = COLD_START_SECONDS
        return HistogramMetricFamily(spec.name, spec.documentation, labels=list(spec.labels))
