"""The metrics the platform exports: names, types, labels and histogram buckets, in one table.

Names, meanings and bucket boundaries follow vLLM V1 (vllm/v1/metrics/loggers.py and its
design doc "Metrics"), so dashboards, autoscalers and routers built for vLLM read them
unchanged. docs/metrics.md describes each one; tests cross-check the Grafana dashboard
against ``exported_sample_names()``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client.utils import floatToGoString

# Label sets. Engine-level series carry the engine id, as vLLM's per-engine series do, so a
# restarted engine (a new id) starts new counter series instead of running them backwards.
ENGINE_LABELS = ("model_name", "engine")
REQUEST_LABELS = ("model_name", "tenant")

# vLLM's bucket boundaries (seconds).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
INTER_TOKEN_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

# vLLM sizes token-count buckets by the model's max_model_len. API processes serve many
# models and the buckets must be the same in every process that writes to Redis, so one
# bound covers every context length the platform serves.
MAX_TOKEN_BUCKET_BOUND = 131_072


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets)."""
    if max_value < 1:
        raise ValueError(f"max_value must be >= 1, got {max_value}")
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(buckets)
            buckets.append(float(value))
        exponent += 1


TOKEN_COUNT_BUCKETS = build_1_2_5_buckets(MAX_TOKEN_BUCKET_BOUND)


@functools.cache
def _bucket_bounds(buckets: tuple[float, ...]) -> tuple[str, ...]:
    # Formatted once per bucket list: every request's observations read them (before, each
    # request formatted about 140 floats on the event loop).
    return (*(floatToGoString(b) for b in buckets), "+Inf")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric family.

    ``name`` is the family name (a counter's samples end in ``_total``); ``field`` is the
    short name request-level metrics use inside their Redis hash.
    """

    name: str
    kind: str  # "gauge", "counter" or "histogram"
    documentation: str
    labels: tuple[str, ...]
    field: str = ""
    buckets: tuple[float, ...] = ()

    @property
    def bucket_bounds(self) -> tuple[str, ...]:
        """Upper bounds as Prometheus writes them in ``le`` (``+Inf`` last)."""
        return _bucket_bounds(self.buckets)

    def sample_names(self) -> tuple[str, ...]:
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


# ---------------------------------------------------------------- from engine status records

NUM_REQUESTS_RUNNING = MetricSpec(
    "vllm:num_requests_running",
    "gauge",
    "Number of requests in model execution batches.",
    ENGINE_LABELS,
)
NUM_REQUESTS_WAITING = MetricSpec(
    "vllm:num_requests_waiting",
    "gauge",
    "Number of requests waiting to be processed (taken from Redis, not yet scheduled).",
    ENGINE_LABELS,
)
KV_CACHE_USAGE = MetricSpec(
    "vllm:kv_cache_usage_perc",
    "gauge",
    "KV-cache usage. 1 means 100 percent usage.",
    ENGINE_LABELS,
)
PREFIX_CACHE_QUERIES = MetricSpec(
    "vllm:prefix_cache_queries",
    "counter",
    "Prefix cache queries, in terms of number of queried tokens.",
    ENGINE_LABELS,
)
PREFIX_CACHE_HITS = MetricSpec(
    "vllm:prefix_cache_hits",
    "counter",
    "Prefix cache hits, in terms of number of cached tokens.",
    ENGINE_LABELS,
)
PROMPT_TOKENS = MetricSpec(
    "vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", ENGINE_LABELS
)
GENERATION_TOKENS = MetricSpec(
    "vllm:generation_tokens", "counter", "Number of generation tokens processed.", ENGINE_LABELS
)
NUM_PREEMPTIONS = MetricSpec(
    "vllm:num_preemptions",
    "counter",
    "Cumulative number of preemption from the engine.",
    ENGINE_LABELS,
)
NUM_STEPS_INSIDE = MetricSpec(
    "platform:engine_steps_inside",
    "counter",
    "Steps run between two layers of the step in flight, for a tenant back from idle.",
    ENGINE_LABELS,
)
HANDED_OVER = MetricSpec(
    "platform:engine_requests_handed_over",
    "counter",
    "Waiting requests this engine handed over to an idle replica of its model.",
    ENGINE_LABELS,
)
IDLE_ANNOUNCEMENTS = MetricSpec(
    "platform:engine_idle_announcements",
    "counter",
    "Times this engine told the other replicas of its model it could take more requests.",
    ENGINE_LABELS,
)
SPEC_DECODE_NUM_DRAFTS = MetricSpec(
    "vllm:spec_decode_num_drafts",
    "counter",
    "Number of spec decoding drafts (verification steps with draft tokens).",
    ENGINE_LABELS,
)
SPEC_DECODE_NUM_DRAFT_TOKENS = MetricSpec(
    "vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", ENGINE_LABELS
)
SPEC_DECODE_NUM_ACCEPTED_TOKENS = MetricSpec(
    "vllm:spec_decode_num_accepted_tokens",
    "counter",
    "Number of accepted tokens.",
    ENGINE_LABELS,
)
SPEC_DECODE_ACCEPTANCE_RATE = MetricSpec(
    "vllm:spec_decode_draft_acceptance_rate",
    "gauge",
    "Speculative token acceptance rate since the engine started (accepted / draft tokens).",
    ENGINE_LABELS,
)

LORA_REQUESTS_INFO = MetricSpec(
    "vllm:lora_requests_info",
    "gauge",
    "Running stats on lora requests (value: when the engine last reported them).",
    (*ENGINE_LABELS, "max_lora", "waiting_lora_adapters", "running_lora_adapters"),
)

# EngineStatus field that feeds each engine-level metric.
ENGINE_STATUS_FIELDS: tuple[tuple[MetricSpec, str], ...] = (
    (NUM_REQUESTS_RUNNING, "num_running"),
    (NUM_REQUESTS_WAITING, "num_waiting"),
    (KV_CACHE_USAGE, "kv_cache_usage"),
    (PREFIX_CACHE_QUERIES, "prefix_cache_queries"),
    (PREFIX_CACHE_HITS, "prefix_cache_hits"),
    (PROMPT_TOKENS, "prompt_tokens_total"),
    (GENERATION_TOKENS, "generation_tokens_total"),
    (NUM_PREEMPTIONS, "num_preemptions"),
    (NUM_STEPS_INSIDE, "num_steps_inside"),
    (HANDED_OVER, "num_handed_over"),
    (IDLE_ANNOUNCEMENTS, "num_idle_announcements"),
    (SPEC_DECODE_NUM_DRAFTS, "spec_decode_num_drafts"),
    (SPEC_DECODE_NUM_DRAFT_TOKENS, "spec_decode_num_draft_tokens"),
    (SPEC_DECODE_NUM_ACCEPTED_TOKENS, "spec_decode_num_accepted_tokens"),
    (SPEC_DECODE_ACCEPTANCE_RATE, "spec_decode_acceptance_rate"),
)

# ---------------------------------------------------------------- recorded by API processes

REQUEST_SUCCESS = MetricSpec(
    "vllm:request_success",
    "counter",
    "Count of successfully processed requests.",
    (*REQUEST_LABELS, "finished_reason"),
    field="success",
)
# Not a vLLM metric: vLLM's prefix-cache counters are per engine, and engines are shared by
# tenants. Divided by vllm:request_prompt_tokens_sum it gives a tenant's prefix-cache hit rate.
PROMPT_TOKENS_CACHED = MetricSpec(
    "platform:request_cached_prompt_tokens",
    "counter",
    "Prompt tokens of finished requests that were served from the prefix cache.",
    REQUEST_LABELS,
    field="cached_tokens",
)
# Not a vLLM metric: requests the tenant's limits refused before any engine saw them, by the
# limiter's reason (requests, tokens, too_large, concurrency, budget, spend, key_spend,
# user_spend, user_blocked). model_name is empty for a refusal before the model was resolved.
REQUESTS_REFUSED = MetricSpec(
    "platform:requests_refused",
    "counter",
    "Requests refused by the tenant's limits or budgets before reaching an engine.",
    (*REQUEST_LABELS, "reason"),
    field="refused",
)

TIME_TO_FIRST_TOKEN = MetricSpec(
    "vllm:time_to_first_token_seconds",
    "histogram",
    "Histogram of time to first token in seconds.",
    REQUEST_LABELS,
    field="ttft",
    buckets=TTFT_BUCKETS,
)
INTER_TOKEN_LATENCY = MetricSpec(
    "vllm:inter_token_latency_seconds",
    "histogram",
    "Histogram of inter-token latency in seconds.",
    REQUEST_LABELS,
    field="itl",
    buckets=INTER_TOKEN_BUCKETS,
)
E2E_REQUEST_LATENCY = MetricSpec(
    "vllm:e2e_request_latency_seconds",
    "histogram",
    "Histogram of e2e request latency in seconds.",
    REQUEST_LABELS,
    field="e2e",
    buckets=REQUEST_LATENCY_BUCKETS,
)
REQUEST_QUEUE_TIME = MetricSpec(
    "vllm:request_queue_time_seconds",
    "histogram",
    # vLLM's help text; ours also counts the wait in the API process for the tenant's turn
    # (inference/transport/tenant_backlog.py), the part of a flood's queue an engine never sees.
    "Histogram of time spent in WAITING phase for request.",
    REQUEST_LABELS,
    field="queue",
    buckets=REQUEST_LATENCY_BUCKETS,
)
REQUEST_PREFILL_TIME = MetricSpec(
    "vllm:request_prefill_time_seconds",
    "histogram",
    "Histogram of time spent in PREFILL phase for request.",
    REQUEST_LABELS,
    field="prefill",
    buckets=REQUEST_LATENCY_BUCKETS,
)
REQUEST_DECODE_TIME = MetricSpec(
    "vllm:request_decode_time_seconds",
    "histogram",
    "Histogram of time spent in DECODE phase for request.",
    REQUEST_LABELS,
    field="decode",
    buckets=REQUEST_LATENCY_BUCKETS,
)
REQUEST_PROMPT_TOKENS = MetricSpec(
    "vllm:request_prompt_tokens",
    "histogram",
    "Number of prefill tokens processed.",
    REQUEST_LABELS,
    field="prompt_tokens",
    buckets=TOKEN_COUNT_BUCKETS,
)
REQUEST_GENERATION_TOKENS = MetricSpec(
    "vllm:request_generation_tokens",
    "histogram",
    "Number of generation tokens processed.",
    REQUEST_LABELS,
    field="generation_tokens",
    buckets=TOKEN_COUNT_BUCKETS,
)

REQUEST_HISTOGRAMS = (
    TIME_TO_FIRST_TOKEN,
    INTER_TOKEN_LATENCY,
    E2E_REQUEST_LATENCY,
    REQUEST_QUEUE_TIME,
    REQUEST_PREFILL_TIME,
    REQUEST_DECODE_TIME,
    REQUEST_PROMPT_TOKENS,
    REQUEST_GENERATION_TOKENS,
)

# ---------------------------------------------------------------- the fleet (database, Redis)

# vLLM has no fleet: these are the platform's own, under its own prefix (metrics/fleet.py).
FLEET_REPLICAS = MetricSpec(
    "platform:fleet_replicas",
    "gauge",
    "Replicas of each deployment by state (0 for a state none is in; stopped ones left out).",
    ("deployment", "model_name", "state"),
)
FLEET_REPLICAS_DESIRED = MetricSpec(
    "platform:fleet_replicas_desired",
    "gauge",
    "Replicas each deployment asks for.",
    ("deployment", "model_name"),
)
FLEET_REPLICAS_UNPLACED = MetricSpec(
    "platform:fleet_replicas_unplaced",
    "gauge",
    "Replicas waiting for a node: no live node has the memory, GPU or labels they need.",
    ("deployment",),
)
FLEET_NODES = MetricSpec(
    "platform:fleet_nodes",
    "gauge",
    "Registered nodes (but those whose agent stopped cleanly) by whether their heartbeat is "
    "live now.",
    ("live",),
)

ENGINE_METRICS = (*(spec for spec, _ in ENGINE_STATUS_FIELDS), LORA_REQUESTS_INFO)
REQUEST_METRICS = (REQUEST_SUCCESS, PROMPT_TOKENS_CACHED, REQUESTS_REFUSED, *REQUEST_HISTOGRAMS)
FLEET_METRICS = (FLEET_REPLICAS, FLEET_REPLICAS_DESIRED, FLEET_REPLICAS_UNPLACED, FLEET_NODES)
ALL_METRICS = (*ENGINE_METRICS, *REQUEST_METRICS, *FLEET_METRICS)


def exported_sample_names() -> frozenset[str]:
    """Every sample name the collector can render (what PromQL expressions may reference)."""
    return frozenset(name for spec in ALL_METRICS for name in spec.sample_names())
