"""Scheduler with hand-made model outputs: budget, chunking, preemption, abort, priority."""

from __future__ import annotations

import itertools

import pytest

from engine.config import EngineConfig
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from engine.request import Request, RequestStatus
from engine.sampling_params import SamplingParams

EOS = 2


def make_scheduler(num_blocks=64, block_size=4, max_model_len=64, **overrides) -> Scheduler:
    config = EngineConfig(model="unused", block_size=block_size, **overrides)
    return Scheduler(
        config, num_blocks=num_blocks, max_model_len=max_model_len, eos_token_ids=[EOS]
    )


_unique = itertools.count(1000)


def make_request(
    rid, num_prompt, max_tokens=4, *, priority=0, arrival=None, shared=False, **params
):
    """Prompts are distinct per request (no accidental prefix hits) unless ``shared``."""
    params.setdefault("temperature", 0.0)
    start = 10 if shared else next(_unique) * 100
    return Request(
        rid,
        list(range(start, start + num_prompt)),
        SamplingParams(max_tokens=max_tokens, **params),
        max_tokens=max_tokens,
        priority=priority,
        arrival_time=arrival,
    )


def fake_model(out: SchedulerOutput, token: int = 7) -> ModelRunnerOutput:
    """Samples ``token`` for every request whose scheduled chunk reaches its last known token."""
    result = ModelRunnerOutput()
    for req in out.scheduled_requests:
        if req.num_computed_tokens + out.num_scheduled_tokens[req.request_id] == req.num_tokens:
            result.sampled_token_ids[req.request_id] = token
    return result


def step(sched: Scheduler, token: int = 7) -> tuple[SchedulerOutput, list[Request]]:
    out = sched.schedule()
    return out, sched.update_from_output(out, fake_model(out, token))


def test_one_budget_shared_with_decodes_first_and_prefill_chunked():
    # No prefix caching: a's first block would otherwise be a cache hit for b.
    sched = make_scheduler(max_num_batched_tokens=10, enable_prefix_caching=False)
    sched.add_request(make_request("a", 6))
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 6}
    sched.add_request(make_request("b", 20))
    out, updated = step(sched)
    # a's decode first (1 token), then b gets the remaining 9 as a chunk.
    assert out.num_scheduled_tokens == {"a": 1, "b": 9}
    assert [r.request_id for r in updated] == ["a"]  # b sampled nothing mid-prefill
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 9}
    out, updated = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 2}
    assert {r.request_id for r in updated} == {"a", "b"}


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room():
    sched = make_scheduler(
        max_num_batched_tokens=10, enable_chunked_prefill=False, max_num_seqs=4, max_model_len=10
    )
    sched.add_request(make_request("a", 4))
    sched.add_request(make_request("b", 8))
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 4}  # b (8) does not fit beside a in 10
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 8}


def test_max_num_seqs_caps_running_requests():
    sched = make_scheduler(max_num_seqs=2)
    for rid in "abc":
        sched.add_request(make_request(rid, 3))
    out, _ = step(sched)
    assert set(out.num_scheduled_tokens) == {"a", "b"}
    assert len(sched.waiting) == 1


def test_finishes_on_max_tokens_eos_and_stop_token_with_min_tokens():
    sched = make_scheduler()
    sched.add_request(make_request("len", 3, max_tokens=2, ignore_eos=True))
    sched.add_request(make_request("eos", 3, max_tokens=5))
    sched.add_request(make_request("stop", 3, max_tokens=5, stop_token_ids=[EOS], min_tokens=2))
    _, updated = step(sched, token=EOS)
    by_id = {r.request_id: r for r in updated}
    assert by_id["eos"].status == RequestStatus.FINISHED_STOPPED
    assert by_id["eos"].stop_reason is None  # EOS, not a stop token
    assert not by_id["stop"].is_finished  # min_tokens=2 holds it
    _, updated = step(sched, token=EOS)
    by_id = {r.request_id: r for r in updated}
    assert by_id["len"].status == RequestStatus.FINISHED_LENGTH
    assert by_id["stop"].status == RequestStatus.FINISHED_STOPPED
    assert by_id["stop"].stop_reason == EOS
    assert sched.kv_cache.num_free_blocks == sched.kv_cache.num_total_blocks


def test_ignore_eos_runs_to_max_tokens():
    sched = make_scheduler()
    sched.add_request(make_request("a", 3, max_tokens=3, ignore_eos=True))
    for _ in range(2):
        _, updated = step(sched, token=EOS)
        assert not updated[0].is_finished
    _, updated = step(sched, token=EOS)
    assert updated[0].status == RequestStatus.FINISHED_LENGTH


def test_preemption_by_recompute_when_blocks_run_out():
    # 6 blocks of 4 tokens; two requests of 8 prompt tokens take 2 blocks each, then grow.
    sched = make_scheduler(num_blocks=6, max_model_len=24)
    sched.add_request(make_request("a", 8, max_tokens=12))
    sched.add_request(make_request("b", 8, max_tokens=12))
    done: dict[str, int] = {}
    preempted = set()
    for _ in range(100):
        if not sched.num_unfinished:
            break
        out, updated = step(sched)
        preempted |= {r.request_id for r in out.preempted_requests}
        for r in updated:
            if r.is_finished:
                done[r.request_id] = r.num_output_tokens
    assert preempted == {"b"}  # the later arrival yields (FCFS)
    assert done == {"a": 12, "b": 12}  # nobody dropped, nobody truncated
    assert sched.num_preemptions >= 1


def test_preempted_request_restarts_from_scratch_keeping_its_tokens():
    sched = make_scheduler(num_blocks=5, max_model_len=20)
    sched.add_request(make_request("a", 8, max_tokens=12))
    sched.add_request(make_request("b", 7, max_tokens=12))
    for _ in range(3):
        step(sched)
    b = sched.requests["b"]
    outputs_before = list(b.output_token_ids)
    while b.status != RequestStatus.PREEMPTED:
        step(sched)
    assert b.num_computed_tokens == 0
    assert b.output_token_ids[: len(outputs_before)] == outputs_before


def test_abort_frees_blocks_of_waiting_and_running_requests():
    sched = make_scheduler(max_num_seqs=1)
    sched.add_request(make_request("run", 8))
    sched.add_request(make_request("wait", 8))
    step(sched)
    assert sched.kv_cache.num_free_blocks < sched.kv_cache.num_total_blocks
    finished = sched.finish_requests(["run", "wait", "unknown"], RequestStatus.FINISHED_ABORTED)
    assert {r.request_id for r in finished} == {"run", "wait"}
    assert all(r.status.finish_reason == "abort" for r in finished)
    assert sched.kv_cache.num_free_blocks == sched.kv_cache.num_total_blocks
    assert sched.num_unfinished == 0
    assert sched.schedule().is_empty


def test_priority_policy_admits_lower_values_first_and_preempts_the_highest():
    sched = make_scheduler(max_num_seqs=1, scheduling_policy="priority")
    sched.add_request(make_request("low", 3, priority=5, arrival=1.0))
    sched.add_request(make_request("high", 3, priority=-1, arrival=2.0))
    out, _ = step(sched)
    assert list(out.num_scheduled_tokens) == ["high"]


def test_prefix_cache_hit_skips_cached_blocks_and_counts_tokens():
    sched = make_scheduler()
    first = make_request("a", 17, max_tokens=1, shared=True)
    sched.add_request(first)
    step(sched)  # computes and caches 4 full blocks, finishes
    second = make_request("b", 17, max_tokens=1, shared=True)
    sched.add_request(second)
    out = sched.schedule()
    assert second.num_cached_tokens == 16
    assert out.num_scheduled_tokens == {"b": 1}
    assert (sched.prefix_cache_queries, sched.prefix_cache_hits) == (34, 16)


def test_fully_cached_prompt_still_computes_its_last_token():
    sched = make_scheduler()
    sched.add_request(make_request("a", 16, max_tokens=1, shared=True))
    step(sched)
    sched.add_request(make_request("b", 16, max_tokens=1, shared=True))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"b": 4}  # last block recomputed for the logits
    assert sched.requests["b"].num_cached_tokens == 12


def test_kv_cache_must_hold_one_full_length_sequence():
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        make_scheduler(num_blocks=3, block_size=4, max_model_len=16)


def test_without_chunked_prefill_the_budget_must_fit_the_longest_prompt():
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        make_scheduler(max_num_batched_tokens=32, enable_chunked_prefill=False, max_num_seqs=4)


def test_priority_policy_preempts_the_lowest_priority_running_request():
    sched = make_scheduler(num_blocks=6, max_model_len=24, scheduling_policy="priority")
    sched.add_request(make_request("urgent", 8, max_tokens=12, priority=0, arrival=2.0))
    sched.add_request(make_request("batch", 8, max_tokens=12, priority=9, arrival=1.0))
    preempted = set()
    while sched.num_unfinished:
        out, _ = step(sched)
        preempted |= {r.request_id for r in out.preempted_requests}
    assert preempted == {"batch"}


def test_priority_preemption_undoes_a_request_already_scheduled_in_the_step():
    # Priority policy: "batch" runs first in the step and registers a block it would fill
    # in this step's forward; then "urgent" needs a block and preempts it. Its scheduled
    # tokens are withdrawn and the unwritten block must not stay in the prefix cache.
    sched = make_scheduler(num_blocks=5, max_model_len=20, scheduling_policy="priority")
    batch = make_request("batch", 5, max_tokens=10, priority=9, arrival=1.0, ignore_eos=True)
    sched.add_request(batch)
    step(sched)
    sched.add_request(make_request("urgent", 11, max_tokens=5, priority=0, arrival=2.0))
    step(sched)
    step(sched)
    out = sched.schedule()
    assert [r.request_id for r in out.preempted_requests] == ["batch"]
    assert out.num_scheduled_tokens == {"urgent": 1}
    cached = sched.kv_cache.pool.cached_blocks
    assert batch.block_hashes[0] in cached  # written in step 1: still reusable
    assert batch.block_hashes[1] not in cached  # promised for this step, never written
