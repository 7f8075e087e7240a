"""In-flight prefix dedup (engine/core/prefix_dedup.py) in the scheduler, with hand-made model
outputs: a request sharing a prefix whose prefill is still being chunked waits for it and takes
it from the cache, while everything else goes ahead; nobody waits on a prefill that left or
that the step leaves out, nor on another tenant's private blocks."""

from __future__ import annotations

import itertools

import pytest

from engine.config import EngineConfig
from engine.core.block_hash import PublicPrefix
from engine.core.scheduler import Scheduler
from engine.request import Request, RequestStatus
from engine.sampling_params import SamplingParams
from tests.engine.core.test_scheduler import fake_model

BLOCK = 4
SYSTEM = list(range(10, 42))  # a declared 32-token system prompt: 8 whole public blocks
PUBLIC = PublicPrefix("shared:support-bot", len(SYSTEM))
_unique = itertools.count(1)


def make_scheduler(**overrides) -> Scheduler:
    """Fair policy: a step whose prompt work comes from two tenants computes at most 8 prompt
    tokens, and a lone prompt gets 12 a step, so a 38-token prefill takes several steps."""
    options = {"max_num_batched_tokens": 12, "fair_step_tokens": 8, "max_num_seqs": 8}
    config = EngineConfig(
        model="unused", block_size=BLOCK, scheduling_policy="fair", **(options | overrides)
    )
    return Scheduler(config, num_blocks=64, max_model_len=64, eos_token_ids=[2])


def chat(
    tenant: str,
    *,
    system=SYSTEM,
    public=PUBLIC,
    num_own=6,
    max_tokens=2,
    arrival_time=None,
    service_class=0,
    **params,
) -> Request:
    """The system prompt and ``num_own`` tokens of the tenant's own, salted per tenant."""
    n = next(_unique)
    return Request(
        f"{tenant}-{n}",
        [*system, *range(1000 * n, 1000 * n + num_own)],
        SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **params),
        max_tokens=max_tokens,
        cache_salt=f"salt-{tenant}",
        public_prefix=public,
        tenant=tenant,
        arrival_time=arrival_time,
        service_class=service_class,
    )


class Run:
    """Steps a scheduler and counts the prompt tokens each request really computes."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.prompt_tokens: dict[str, int] = {}

    def step(self):
        out = self.sched.schedule()
        for r in out.scheduled_requests:
            rid, done = r.request_id, r.num_computed_tokens
            end = min(done + out.num_scheduled_tokens[rid], r.num_prompt_tokens)
            self.prompt_tokens[rid] = self.prompt_tokens.get(rid, 0) + max(0, end - done)
        self.sched.update_from_output(out, fake_model(out))
        return out

    def until_done(self, max_steps: int = 50) -> None:
        for _ in range(max_steps):
            if not self.sched.num_unfinished:
                return
            self.step()
        raise AssertionError(f"still unfinished after {max_steps} steps: {self.sched.requests}")


def new_ids(out) -> set[str]:
    return {r.request_id for r in out.new_requests}


def test_a_second_request_waits_for_the_prefill_in_flight_and_takes_it_from_the_cache():
    sched = make_scheduler()
    run = Run(sched)
    first, second = chat("a"), chat("b")
    sched.add_request(first)
    run.step()  # a alone: its first 12 tokens, 3 public blocks now cached
    assert first.num_computed_tokens == 12
    sched.add_request(second)
    # a's chunks (8 tokens a step now: two tenants) compute the prefix, 12 -> 20 -> 28 -> 36,
    # before b comes in.
    while second.status == RequestStatus.WAITING:
        out = run.step()
        if second.status == RequestStatus.WAITING:  # the holder progresses while b waits
            assert first.request_id in out.num_scheduled_tokens
    assert first.num_computed_tokens >= len(SYSTEM)
    assert second.num_cached_tokens == len(SYSTEM)  # every public block, as hits
    run.until_done()
    # One prefill of the system prompt, plus b's own question.
    assert run.prompt_tokens == {first.request_id: 38, second.request_id: 6}
    assert sched.prefix_cache_hits == len(SYSTEM)


def b_waits_on_a_behind_c(sched: Scheduler, run: Run, *also: Request):
    """a's prefill is under way; then ``also``, b (the same system prompt) and c (4 tokens
    of its own; the best waiting request, its tenant being newest) arrive. c is admitted
    first, then b waits on a, whose chunk waits a step too (the step that admits c ahead of
    a's lane computes none of a's: fair_share.py, "Admission"): (a, b, c, that step's output)."""
    first, second, other = chat("a"), chat("b"), chat("c", system=[], public=None, num_own=4)
    sched.add_request(first)
    run.step()
    for request in (*also, second, other):
        sched.add_request(request)
    out = run.step()
    assert second.status == RequestStatus.WAITING and sched.in_flight.num_deferrals == 1
    assert first.num_computed_tokens == 12
    return first, second, other, out


def test_requests_not_sharing_the_prefix_go_ahead_of_the_one_that_waits():
    sched = make_scheduler()
    run = Run(sched)
    first, second, other, out = b_waits_on_a_behind_c(sched, run)
    assert new_ids(out) == {other.request_id}
    assert out.num_scheduled_tokens == {other.request_id: 4}
    while second.status == RequestStatus.WAITING:
        run.step()
    assert second.num_cached_tokens == len(SYSTEM)
    run.until_done()
    assert run.prompt_tokens == {first.request_id: 38, second.request_id: 6, other.request_id: 4}


def test_the_prefill_the_best_waiting_request_waits_on_is_not_put_behind_admissions():
    # c then b arrive while a's prefill is chunked: b is the most under its share (the best
    # waiting request) and waits on a; a's chunk goes first in the step, not after c's
    # admission took the step's 8 prompt tokens (a's tenant is over b's and c's).
    sched = make_scheduler()
    run = Run(sched)
    first = chat("a")
    sched.add_request(first)
    run.step()
    other, second = chat("c", system=[], public=None, num_own=8), chat("b")
    sched.add_request(other)
    sched.add_request(second)
    assert sched.waiting.peek() is second
    out = run.step()
    assert out.num_scheduled_tokens == {first.request_id: 8}
    while second.status == RequestStatus.WAITING:
        run.step()
    assert second.num_cached_tokens == len(SYSTEM)


def test_an_aborted_holder_releases_the_request_waiting_on_it():
    sched = make_scheduler()
    run = Run(sched)
    first, second, _, _ = b_waits_on_a_behind_c(sched, run)
    sched.finish_requests([first.request_id], RequestStatus.FINISHED_ABORTED)
    out = run.step()
    # a's 3 written blocks stay in the cache; b computes the rest itself.
    assert second.request_id in new_ids(out)
    assert second.num_cached_tokens == 12
    run.until_done()


def test_a_preempted_holder_releases_the_request_waiting_on_it():
    # Four running sequences at most. a's prefill is under way beside a second request of a's
    # tenant (one prompt token, decoding). c, b and d arrive (each newer tenant is lifted just
    # under the others: d, b, c is the queue's order): d comes in, b waits on a, c comes in
    # and fills the batch. The next step makes room for b, whose tenant runs nothing: a, its
    # tenant's latest arrival, is preempted, and b comes in in that step, no longer waiting.
    sched = make_scheduler(max_num_seqs=4)
    run = Run(sched)
    earlier = chat("a", system=[], public=None, num_own=1, max_tokens=10, arrival_time=1.0)
    first, second = chat("a", arrival_time=2.0), chat("b")
    c, d = (chat(t, system=[], public=None, num_own=1) for t in ("c", "d"))
    for request in (earlier, first):
        sched.add_request(request)
    run.step()
    assert first.num_computed_tokens == 11
    for request in (c, second, d):
        sched.add_request(request)
    out = run.step()
    assert new_ids(out) == {c.request_id, d.request_id} and len(sched.running) == 4
    assert second.status == RequestStatus.WAITING and sched.in_flight.num_deferrals == 1
    out = run.step()
    assert out.preempted_requests == [first]
    assert new_ids(out) == {second.request_id}
    assert second.num_cached_tokens == 8  # what a had written: 2 whole blocks
    run.until_done()


def test_nobody_waits_on_a_prefill_the_step_leaves_out():
    # One batch-class line a step while interactive requests arrive (batch_step_seqs=1): the
    # batch request x, admitted first, takes it, and the batch prefill a stalls until x ends.
    # The interactive b, which shares a's system prompt, computes it rather than wait on a.
    sched = make_scheduler(batch_step_seqs=1)
    run = Run(sched)
    batch = {"service_class": 1}
    decoder = chat("x", system=[], public=None, num_own=4, max_tokens=20, **batch)
    first = chat("a", **batch)
    sched.add_request(decoder)
    sched.add_request(first)
    run.step()
    assert first.num_computed_tokens == 4
    second = chat("b")
    sched.add_request(second)
    out = run.step()
    assert first.request_id not in out.num_scheduled_tokens  # stalled behind x
    assert new_ids(out) == {second.request_id}
    assert second.num_cached_tokens == 4
    assert sched.in_flight.num_deferrals == 0


@pytest.mark.parametrize("case", ["tenants-salted-apart", "prefix-caching-off", "prompt-logprobs"])
def test_requests_that_could_not_share_the_blocks_never_wait(case):
    sched = make_scheduler(enable_prefix_caching=case != "prefix-caching-off")
    run = Run(sched)
    # Without the declared public prefix each tenant's blocks are salted apart.
    public = None if case == "tenants-salted-apart" else PUBLIC
    params = {"prompt_logprobs": 0} if case == "prompt-logprobs" else {}
    first, second = chat("a", public=public), chat("b", public=public, **params)
    sched.add_request(first)
    run.step()
    sched.add_request(second)
    out = run.step()
    assert second.request_id in new_ids(out)
    assert second.num_cached_tokens == 0
    assert sched.in_flight.num_deferrals == 0


@pytest.mark.parametrize("per_step", [2, 64], ids=["two-a-step", "all-at-once"])
def test_64_tenants_sending_one_declared_prompt_prefill_it_once(per_step):
    # tests/inference/test_shared_prefix_serving.py at the scheduler, with the engine's
    # defaults (2,048 tokens a step, 512 in a shared step, blocks of 16): its CI flake was
    # cached tokens of [0, 512, 1024, 1536, 2000, ...].
    config = EngineConfig(model="unused", scheduling_policy="fair")
    sched = Scheduler(config, num_blocks=10_000, max_model_len=4096, eos_token_ids=[2])
    system, public = list(range(100, 2100)), PublicPrefix("shared:support-bot", 2000)
    chats = [chat(f"t{i}", system=system, public=public) for i in range(64)]
    run = Run(sched)
    for start in range(0, 64, per_step):
        for request in chats[start : start + per_step]:
            sched.add_request(request)
        run.step()
    run.until_done()
    assert sorted(r.num_cached_tokens for r in chats) == [0] + [2000] * 63
    assert sum(run.prompt_tokens.values()) == 2000 + 64 * 6
