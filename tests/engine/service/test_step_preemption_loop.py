"""Step preemption in the service loop, in-process on a real LLMEngine (engine/service/
step_preemption.py): a request that reaches the inbox while a step computes is published from
a step inside it, before that step's own outputs, and one that arrives between two steps from a
step ahead of the batch's next; a nested step that fails turns the feature off and loses
nothing."""

from __future__ import annotations

import time
import uuid

import pytest

from engine import protocol
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.service import EngineService, ServiceSettings
from engine.service.intake_order import SLICE_TOKENS
from engine.service.redis_input import NewRequest
from tests.engine.service.test_service_loop import queued_jobs


@pytest.fixture
def service(tiny_llama, redis_server):
    config = EngineConfig(
        model=str(tiny_llama), device="cpu", max_num_seqs=2, scheduling_policy="fair"
    )
    settings = ServiceSettings(
        model_name="inside", redis_url=redis_server.url, prefix=f"in{uuid.uuid4().hex[:6]}"
    )
    svc = EngineService(LLMEngine(config), settings)
    yield svc
    svc.redis.close()


def new_request(request_id: str, tenant: str, prompt_len: int) -> NewRequest:
    request = protocol.GenerateRequest(
        request_id=request_id,
        frontend_id="fe",
        prompt_token_ids=[(7 * i + len(request_id)) % 500 + 10 for i in range(prompt_len)],
        sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=3, ignore_eos=True),
        tenant=tenant,
    )
    return NewRequest(f"{int(time.time() * 1000)}-{uuid.uuid4().int % 1000}", request)


def send_b_at_first_checkpoint(service: EngineService) -> None:
    """B's request reaches the inbox while the flood's first step is computing."""
    runner = service.engine.runner
    hook, sent = runner.preemption_hook, []

    def wrapped():
        if not sent:
            sent.append(service.inbox.put(new_request("b", "tB", 12)))
        hook()

    runner.preemption_hook = wrapped


def deltas_by_job(service: EngineService) -> list[list[str]]:
    return [
        [d.request_id for ds in job.outputs.values() for d in ds] for job in queued_jobs(service)
    ]


def test_a_request_arriving_mid_step_is_published_before_that_step_ends(service):
    for i in range(2):
        service.inbox.put(new_request(f"a{i}", "tA", 600))
    send_b_at_first_checkpoint(service)
    service.run_once()  # drain the flood, step (B runs inside it), publish
    jobs = deltas_by_job(service)
    assert jobs == [["b"], ["a0", "a1"]]  # B's first token went out first
    assert service.engine.stats().num_steps_inside == 1
    assert "b" in service.active and service.active["b"].started


def test_a_failing_nested_step_turns_step_preemption_off_and_loses_nothing(service, monkeypatch):
    step_inside = service.engine.step_inside

    def broken(request_ids, *, between_steps=False):
        if between_steps:  # the flood's own requests, between steps: not under test here
            return step_inside(request_ids, between_steps=True)
        raise RuntimeError("injected")

    monkeypatch.setattr(service.engine, "step_inside", broken)
    for i in range(2):
        service.inbox.put(new_request(f"a{i}", "tA", 600))
    send_b_at_first_checkpoint(service)
    service.run_once()
    assert service.engine.runner.preemption_hook is None
    for _ in range(20):
        service.run_once()
    assert finished_ids(service) == {"a0", "a1", "b"}


def finished_ids(service: EngineService) -> set[str]:
    return {
        d.request_id
        for job in queued_jobs(service)
        for ds in job.outputs.values()
        for d in ds
        if d.finish_reason
    }


def test_a_short_request_arriving_between_steps_runs_ahead_of_the_batchs_next_step(service):
    service.inbox.put(new_request("a0", "tA", 600))
    service.run_once()  # A's first step; one of the two seats is free
    service.inbox.put(new_request("b", "tB", 12))
    service.run_once()  # B's step of its own, then the batch's next, B's second token in it
    jobs = deltas_by_job(service)
    assert jobs[-2:] == [["b"], ["a0", "b"]]
    assert service.engine.stats().num_steps_inside == 0  # none ran inside another
    # With both seats taken, a newcomer between two steps waits for one (it never rides there).
    service.inbox.put(new_request("a1", "tA", 600))
    service.run_once()
    service.inbox.put(new_request("c", "tC", 12))
    service.run_once()
    assert ["c"] not in deltas_by_job(service)[-2:]  # no step of its own
    # Alone on the engine, a request runs in the next step as ever: no step ahead of it.
    while service.active:
        service.run_once()
    steps = service.num_steps
    service.inbox.put(new_request("c", "tC", 12))
    service.run_once()
    assert deltas_by_job(service)[-1] == ["c"]
    assert service.num_steps == steps + 1  # its step was the batch's only one


def test_a_failing_step_ahead_of_the_batch_turns_step_preemption_off_and_loses_nothing(
    service, monkeypatch
):
    step_inside = service.engine.step_inside

    def broken(request_ids, *, between_steps=False):
        if between_steps and "b" in request_ids:
            raise RuntimeError("injected")
        return step_inside(request_ids, between_steps=between_steps)

    monkeypatch.setattr(service.engine, "step_inside", broken)
    for i in range(2):
        service.inbox.put(new_request(f"a{i}", "tA", 600))
    service.run_once()
    service.inbox.put(new_request("b", "tB", 12))
    service.run_once()
    assert service.engine.runner.preemption_hook is None
    for _ in range(20):
        service.run_once()
    assert finished_ids(service) == {"a0", "a1", "b"}


def flood(service: EngineService, count: int, prompt_len: int = 600) -> list[str]:
    ids = [f"a{i}" for i in range(count)]
    for request_id in ids:
        service.inbox.put(new_request(request_id, "tA", prompt_len))
    return ids


def test_a_flood_is_added_a_slice_at_a_time_and_a_newcomer_goes_ahead_of_its_rest(service):
    ids = flood(service, 40)
    first = service.drain_inputs()
    per_slice = -(-SLICE_TOKENS // 600)  # the request that passes the budget is in the slice
    assert first == ids[:per_slice]
    assert service.inbox.num_requests == 40 - per_slice  # the rest wait, counted as queued
    service.inbox.put(new_request("b", "tB", 12))
    second = service.drain_inputs()
    assert second[0] == "b" and second[1:] == ids[per_slice : len(second) - 1 + per_slice]
    for _ in range(400):
        if not (service.active or service.inbox.num_requests):
            break
        service.run_once()
    endings = [
        d.request_id
        for job in queued_jobs(service)
        for ds in job.outputs.values()
        for d in ds
        if d.finish_reason
    ]
    assert sorted(endings) == sorted([*ids, "b"])  # each answered, once


def test_draining_hands_back_the_requests_still_waiting_for_their_slice(service):
    ids = flood(service, 40)
    service.drain_inputs()
    assert service.inbox.num_requests > 0
    service.request_drain()
    service.run_once()  # begins the drain: nothing is deferred any more
    handed_back = [r.request_id for job in queued_jobs(service) for r in job.requeue]
    assert sorted(handed_back) == sorted(ids) and service.inbox.num_requests == 0


def test_a_pause_between_layers_adds_one_slice_of_a_flood(service):
    service.inbox.put(new_request("c", "tC", 600))
    runner = service.engine.runner
    hook, left_after_pause = runner.preemption_hook, []

    def wrapped():
        if not left_after_pause:
            flood(service, 40)  # arrives while C's first step computes
        hook()
        left_after_pause.append(service.inbox.num_requests)

    runner.preemption_hook = wrapped
    service.run_once()
    per_slice = -(-SLICE_TOKENS // 600)
    assert left_after_pause[0] == 40 - per_slice
    # Each later pause of the same step takes the next slice.
    assert left_after_pause[1] == max(0, 40 - 2 * per_slice)
