"""Settling a generation: one usage record queued in Redis and the request in /metrics."""

from __future__ import annotations

import asyncio
import time

import pytest

from controlplane.access.admission import admit
from controlplane.adapters.selectors import AdapterRoute
from inference.generation.plan import GenerationStats
from inference.generation.use_case import settle_generation
from tests.support.generation_factories import MODEL, make_chunk, make_plan, make_principal
from tests.support.metrics_scrape import scrape

PROMPTS = [("Once", [11, 12]), ("Twice", [21, 22, 23])]
STOP_LABELS = {"model_name": MODEL, "tenant": "acme", "finished_reason": "stop"}


async def admitted(plan):
    return await admit(
        make_principal(), model=plan.model, prompt_tokens=plan.prompt_tokens, max_tokens=32
    )


def observed(*items) -> GenerationStats:
    stats = GenerationStats(started=time.monotonic() - 0.5)
    for prompt_index, choice, chunk in items:
        stats.observe(prompt_index, choice, chunk)
    return stats


async def test_finished_generation_queues_its_usage_once(usage_events):
    plan = make_plan("completion", prompts=PROMPTS)
    stats = observed(
        (0, 0, make_chunk("a", completion_tokens=1, cached_tokens=2)),
        (1, 1, make_chunk("b", completion_tokens=1, cached_tokens=1)),
        (0, 0, make_chunk("c", completion_tokens=2, finish_reason="length", cached_tokens=2)),
        (1, 1, make_chunk("d", completion_tokens=2, finish_reason="stop", cached_tokens=1)),
    )
    admission = await admitted(plan)
    await settle_generation(admission, plan, stats, status=200)
    [event] = await usage_events()
    principal = admission.principal
    assert (event.tenant_id, event.key_id, event.key_prefix) == (
        principal.tenant_id,
        principal.key_id,
        principal.key_prefix,
    )
    # The id the client got, which a client quotes and stored answers are kept under.
    assert (event.model, event.adapter, event.request_id) == (MODEL, "", plan.request_id)
    assert (event.prompt_tokens, event.completion_tokens, event.cached_tokens) == (5, 4, 3)
    assert (event.status, event.finish_reason) == (200, "stop")
    assert event.latency >= 0.5
    assert 0 < event.time_to_first_token <= event.latency


async def test_finished_generation_is_counted_in_request_metrics(usage_events):
    plan = make_plan(tenant="acme")
    stats = observed(
        (0, 0, make_chunk("a", completion_tokens=1)),
        (0, 0, make_chunk("b", completion_tokens=2, finish_reason="length", decode_time=0.25)),
    )
    await settle_generation(await admitted(plan), plan, stats, status=200)
    metrics, labels = scrape(), {"model_name": MODEL, "tenant": "acme"}
    assert metrics.value("vllm:request_success_total", **labels, finished_reason="length") == 1
    assert metrics.value("vllm:request_prompt_tokens_sum", **labels) == 3
    assert metrics.value("vllm:request_generation_tokens_sum", **labels) == 2
    assert metrics.value("vllm:inter_token_latency_seconds_count", **labels) == 1
    assert metrics.value("vllm:request_decode_time_seconds_sum", **labels) == 0.25


@pytest.mark.parametrize(("status", "reason"), [(499, "abort"), (503, "error")])
async def test_generation_ended_before_any_finish(usage_events, status, reason):
    plan = make_plan(prompts=PROMPTS)
    stats = observed((1, 0, make_chunk("a", completion_tokens=1)))
    await settle_generation(await admitted(plan), plan, stats, status=status)
    [event] = await usage_events()
    assert (event.status, event.finish_reason) == (status, "")
    assert (event.prompt_tokens, event.completion_tokens) == (5, 1)
    labels = {"model_name": MODEL, "tenant": "acme"}
    assert scrape().value("vllm:request_success_total", **labels, finished_reason=reason) == 1


async def test_usage_of_an_adapter_names_it(usage_events):
    route = AdapterRoute(name="pirate", base_model=MODEL, checksum="c", path="/p", created=0)
    plan = make_plan(model="pirate", engine_model=MODEL, adapter=route)
    await settle_generation(await admitted(plan), plan, observed(), status=200)
    [event] = await usage_events()
    assert (event.model, event.adapter, event.time_to_first_token) == ("pirate", "pirate", None)


async def test_settlement_completes_when_its_task_is_cancelled(usage_events):
    # SDKs close the connection right after [DONE], which cancels the request task.
    plan = make_plan()
    stats = observed((0, 0, make_chunk("a", completion_tokens=1, finish_reason="stop")))
    task = asyncio.create_task(settle_generation(await admitted(plan), plan, stats, status=200))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: scrape().value("vllm:request_success_total", **STOP_LABELS) == 1)
    assert [(e.status, e.completion_tokens) for e in await usage_events()] == [(200, 1)]


async def eventually(check, timeout: float = 2.0) -> None:
    """Wait until ``check()`` is true; work that outlives a cancelled task lands a bit later."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except KeyError:  # the metric is not there yet
            pass
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.02)
