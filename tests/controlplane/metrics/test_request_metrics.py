"""Request-level metrics: recorded by API processes into Redis, rendered the same by all."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from django.test import override_settings

from controlplane.metrics import definitions as d
from controlplane.metrics import record_request
from controlplane.metrics.recorder import request_increments
from tests.support.metrics_scrape import scrape

MODEL = "tiny"


def _record(**overrides):
    values = dict(
        model=MODEL,
        tenant="acme",
        finished_reason="stop",
        prompt_tokens=7,
        generation_tokens=3,
        e2e_latency=1.2,
        time_to_first_token=0.03,
        inter_token_latencies=[0.02, 0.3],
        queue_time=0.4,
        prefill_time=0.01,
        decode_time=0.32,
        cached_tokens=4,
    )
    values.update(overrides)
    return record_request(**values)


async def test_one_request_renders_every_request_metric(redis_client):
    await _record()
    s = scrape()
    labels = {"model_name": MODEL, "tenant": "acme"}
    assert s.value("vllm:request_success_total", **labels, finished_reason="stop") == 1
    assert s.value("platform:request_cached_prompt_tokens_total", **labels) == 4
    for spec in d.REQUEST_HISTOGRAMS:
        assert s.types[spec.name] == "histogram"
        expected_count = 2 if spec is d.INTER_TOKEN_LATENCY else 1
        assert s.value(f"{spec.name}_count", **labels) == expected_count, spec.name
    assert s.value("vllm:request_prompt_tokens_sum", **labels) == 7
    assert s.value("vllm:request_generation_tokens_sum", **labels) == 3
    assert s.value("vllm:inter_token_latency_seconds_sum", **labels) == pytest.approx(0.32)
    assert s.value("vllm:request_queue_time_seconds_sum", **labels) == pytest.approx(0.4)
    # Buckets are cumulative, with vLLM's boundaries: TTFT 0.03 s lies in (0.02, 0.04].
    ttft = s.buckets("vllm:time_to_first_token_seconds", **labels)
    assert list(ttft) == list(d.TIME_TO_FIRST_TOKEN.bucket_bounds)
    assert ttft["0.02"] == 0 and ttft["0.04"] == 1 and ttft["+Inf"] == 1
    # ITL 0.02 -> (0.01, 0.025], 0.3 -> le=0.3 (a value on a bound belongs to that bucket).
    itl = s.buckets("vllm:inter_token_latency_seconds", **labels)
    assert (itl["0.01"], itl["0.025"], itl["0.2"], itl["0.3"], itl["+Inf"]) == (0, 1, 1, 2, 2)
    prompt = s.buckets("vllm:request_prompt_tokens", **labels)
    assert (prompt["5.0"], prompt["10.0"]) == (0, 1)


async def test_engine_intervals_the_caller_lacks_are_not_observed(redis_client):
    await _record(queue_time=None, prefill_time=None, decode_time=None, time_to_first_token=None)
    s = scrape()
    assert s.value("vllm:e2e_request_latency_seconds_count", model_name=MODEL, tenant="acme") == 1
    for name in (
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:time_to_first_token_seconds",
    ):
        assert s.series(f"{name}_count") == [], name
        assert s.types[name] == "histogram"  # HELP/TYPE stay, so dashboards find the name


async def test_labels_separate_models_tenants_and_finish_reasons(redis_client):
    await _record(tenant="acme", finished_reason="stop")
    await _record(tenant="acme", finished_reason="length")
    await _record(tenant="globex", finished_reason="stop")
    await _record(model="other", tenant="acme", finished_reason="abort")
    s = scrape()
    success = "vllm:request_success_total"
    assert s.value(success, model_name=MODEL, tenant="acme", finished_reason="stop") == 1
    assert s.value(success, model_name=MODEL, tenant="acme", finished_reason="length") == 1
    assert s.value(success, model_name=MODEL, tenant="globex", finished_reason="stop") == 1
    assert s.value(success, model_name="other", tenant="acme", finished_reason="abort") == 1
    assert len(s.series(success)) == 4


def _script_calls(redis_client) -> int:
    return redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


async def test_requests_that_end_together_share_one_script_call_and_all_count(redis_client):
    """A burst of requests ending in one engine step costs Redis one script, not one each."""
    before = _script_calls(redis_client)
    await asyncio.gather(
        *[
            _record(tenant=tenant, finished_reason=reason)
            for _ in range(5)
            for tenant in ("acme", "globex")
            for reason in ("stop", "length")
        ]
    )
    # One write; redis-py sends the script a second time when Redis did not have it cached.
    assert _script_calls(redis_client) - before <= 2
    s = scrape()
    for tenant in ("acme", "globex"):
        labels = {"model_name": MODEL, "tenant": tenant}
        for reason in ("stop", "length"):
            assert s.value("vllm:request_success_total", **labels, finished_reason=reason) == 5
        assert s.value("vllm:request_prompt_tokens_sum", **labels) == 70
        assert s.value("vllm:inter_token_latency_seconds_count", **labels) == 20
        assert s.value("vllm:e2e_request_latency_seconds_sum", **labels) == pytest.approx(12.0)
        assert s.buckets("vllm:time_to_first_token_seconds", **labels)["0.04"] == 10
        assert s.value("platform:request_cached_prompt_tokens_total", **labels) == 40


async def test_a_request_that_ends_during_a_write_returns_once_the_next_one_holds_it(
    redis_client,
):
    first = asyncio.create_task(_record(tenant="acme"))
    for _ in range(3):
        await asyncio.sleep(0)  # the first request's write is under way
    await _record(tenant="globex")
    labels = {"model_name": MODEL, "finished_reason": "stop"}
    assert scrape().value("vllm:request_success_total", tenant="globex", **labels) == 1
    await first
    assert scrape().value("vllm:request_success_total", tenant="acme", **labels) == 1


async def test_a_bad_request_among_good_ones_drops_alone(redis_client, caplog):
    await asyncio.gather(_record(), _record(e2e_latency=float("nan")), _record())
    assert "dropped" in caplog.text
    labels = {"model_name": MODEL, "tenant": "acme"}
    s = scrape()
    assert s.value("vllm:request_success_total", **labels, finished_reason="stop") == 2
    assert s.value("vllm:e2e_request_latency_seconds_count", **labels) == 2


@pytest.mark.slow
def test_two_processes_neither_lose_nor_double_count(redis_client, redis_server):
    """Two API processes record concurrently; every scrape renders the exact union."""
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    per_process = 150
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.record_many",
                str(per_process),
                tenant,
            ],
            env=env,
        )
        for tenant in ("acme", "acme", "globex")
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]

    s = scrape()
    for tenant, processes in (("acme", 2), ("globex", 1)):
        labels = {"model_name": MODEL, "tenant": tenant}
        requests = processes * per_process
        half = requests // 2
        success = "vllm:request_success_total"
        assert s.value(success, **labels, finished_reason="stop") == half
        assert s.value(success, **labels, finished_reason="length") == half
        for spec in d.REQUEST_HISTOGRAMS:
            if spec.field in ("queue", "prefill", "decode"):
                continue  # record_many has no engine timestamps
            assert s.value(f"{spec.name}_count", **labels) == requests, spec.name
            assert s.buckets(spec.name, **labels)["+Inf"] == requests, spec.name
        # Prompts are 1..per_process tokens in each process.
        prompt_sum = processes * per_process * (per_process + 1) / 2
        assert s.value("vllm:request_prompt_tokens_sum", **labels) == prompt_sum
        assert s.value("vllm:request_generation_tokens_sum", **labels) == 2 * requests
        assert s.value("vllm:e2e_request_latency_seconds_sum", **labels) == pytest.approx(
            0.5 * requests
        )
        assert s.buckets("vllm:time_to_first_token_seconds", **labels)["0.04"] == 0
        assert s.buckets("vllm:time_to_first_token_seconds", **labels)["0.06"] == requests
        assert s.value("platform:request_cached_prompt_tokens_total", **labels) == requests


async def test_a_request_cancelled_while_recording_is_still_counted(redis_client):
    """SDKs close the connection right after the last chunk; the server cancels the task."""
    task = asyncio.create_task(_record())
    await asyncio.sleep(0)  # the write is under way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    labels = {"model_name": MODEL, "tenant": "acme", "finished_reason": "stop"}
    for _ in range(100):
        if scrape().series("vllm:request_success_total"):
            break
        await asyncio.sleep(0.02)
    assert scrape().value("vllm:request_success_total", **labels) == 1


async def test_redis_down_drops_the_metric_without_raising(redis_client, caplog):
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        await asyncio.wait_for(_record(), timeout=10)
    assert "request metrics for model tiny dropped" in caplog.text
    assert scrape().series("vllm:request_success_total") == []


@pytest.mark.parametrize(
    "bad",
    [
        {"prompt_tokens": -1},
        {"e2e_latency": float("inf")},
        {"inter_token_latencies": [0.01, float("nan")]},
    ],
)
async def test_bad_values_drop_the_whole_request_and_log(redis_client, caplog, bad):
    await _record(**bad)
    assert "dropped" in caplog.text
    s = scrape()
    assert s.series("vllm:request_success_total") == []
    assert s.series("vllm:request_prompt_tokens_count") == []  # nothing half-written


def test_a_long_generation_costs_few_hash_fields():
    """10,000 inter-token latencies bucket locally: one increment per touched bucket."""
    fields = request_increments(
        finished_reason="stop",
        prompt_tokens=5,
        generation_tokens=10_001,
        e2e_latency=30.0,
        time_to_first_token=0.1,
        inter_token_latencies=[0.02] * 5_000 + [0.06] * 5_000,
        queue_time=None,
        prefill_time=None,
        decode_time=None,
    )
    itl = {name: n for name, n in fields if name.startswith("itl|")}
    assert itl.pop("itl|sum") == pytest.approx(400.0)
    assert itl == {"itl|0.025": 5_000, "itl|0.075": 5_000, "itl|count": 10_000}
