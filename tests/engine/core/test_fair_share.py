"""The fair policy (engine/core/fair_share.py) in the scheduler, with hand-made model outputs:
weighted shares, idle return, no starvation, classes, preemption choice, work conservation."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from engine.config import EngineConfig
from engine.core.fair_share import FairQueue, VirtualTokenCounter, service_class_rank
from engine.core.scheduler import Scheduler
from engine.request import Request, RequestStatus
from engine.sampling_params import SamplingParams
from tests.engine.core.test_scheduler import step

_unique = itertools.count(1)


def fair_scheduler(num_blocks=512, max_num_seqs=4, max_model_len=256, **overrides) -> Scheduler:
    config = EngineConfig(
        model="unused",
        block_size=4,
        scheduling_policy="fair",
        max_num_seqs=max_num_seqs,
        **overrides,
    )
    return Scheduler(config, num_blocks=num_blocks, max_model_len=max_model_len, eos_token_ids=[2])


def request(tenant, *, num_prompt=8, max_tokens=8, weight=1.0, service_class=0, priority=0):
    start = next(_unique) * 1000  # distinct prompts: no prefix-cache hits between requests
    return Request(
        f"{tenant}-{start}",
        list(range(start, start + num_prompt)),
        SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
        max_tokens=max_tokens,
        tenant=tenant,
        weight=weight,
        service_class=service_class,
        priority=priority,
    )


def run(sched: Scheduler, num_steps: int) -> Counter:
    """Output tokens per tenant over ``num_steps`` steps."""
    tokens: Counter = Counter()
    for _ in range(num_steps):
        _, updated = step(sched)
        tokens.update(r.tenant for r in updated if r.num_output_tokens)
    return tokens


def test_weights_one_to_three_share_output_tokens_one_to_three():
    sched = fair_scheduler()
    for _ in range(200):
        sched.add_request(request("light", weight=1.0))
        sched.add_request(request("heavy", weight=3.0))
    tokens = run(sched, 400)  # both stay backlogged: 400 steps serve ~200 of 400 requests
    assert sched.waiting and {r.tenant for r in sched.waiting} == {"light", "heavy"}
    ratio = tokens["heavy"] / tokens["light"]
    assert ratio == pytest.approx(3.0, rel=0.10), tokens


def test_fcfs_serves_a_flood_before_a_later_tenant_but_fair_does_not():
    def first_token_step(policy: str) -> int:
        config = EngineConfig(model="unused", block_size=4, max_num_seqs=4)
        config.scheduling_policy = policy
        sched = Scheduler(config, num_blocks=512, max_model_len=256, eos_token_ids=[2])
        for _ in range(64):
            sched.add_request(request("flood"))
        run(sched, 3)
        late = request("late")
        sched.add_request(late)
        for n in itertools.count(1):
            run(sched, 1)
            if late.num_output_tokens:
                return n

    assert first_token_step("fair") <= 3  # the batch makes room at once
    assert first_token_step("fcfs") > 100  # behind all 64 of the flood


def test_a_tenant_back_from_idle_is_lifted_and_cannot_starve_the_others():
    sched = fair_scheduler()
    for _ in range(300):
        sched.add_request(request("busy"))
    run(sched, 200)  # "busy" has been charged for a lot; "idle" sent nothing meanwhile
    busy_counter = sched.fair.counter("busy")
    assert busy_counter > 1000
    for _ in range(100):
        sched.add_request(request("idle"))
    # Lifted to the backlogged tenant's counter: no credit banked while it sent nothing.
    assert sched.fair.counter("idle") == pytest.approx(busy_counter - 1)
    tokens = run(sched, 100)
    assert tokens["busy"] == pytest.approx(tokens["idle"], rel=0.25), tokens


def test_a_returning_tenant_with_nobody_backlogged_starts_at_the_highest_counter():
    vtc = VirtualTokenCounter()
    vtc.counters = {"a": 50.0, "b": 900.0}
    vtc.on_arrival(c := request("c"))
    assert vtc.counter("c") == 900.0
    vtc.on_leave(c)
    vtc.on_arrival(b := request("b"))  # nobody backlogged: the highest counter, its own
    vtc.on_arrival(a := request("a"))  # b backlogged, not served yet: b's counter
    assert vtc.counter("a") == 900.0
    vtc.on_leave(a)
    vtc.charge(b, 1)  # b served since it came: a returning is lifted under it
    vtc.on_arrival(request("d"))
    assert vtc.counter("d") == 900.0 + 1 - 1


def test_the_backlog_counts_follow_arrivals_finishes_aborts_and_preemptions():
    """The counter tells a tenant back from idle by its count of unfinished requests, kept as
    they come and go: a count left behind by any way out of the scheduler would leave that
    tenant never lifted again (and one missing, lifted while it still has requests)."""
    import random

    rng = random.Random(7)
    sched = fair_scheduler(num_blocks=20, max_num_seqs=6, max_model_len=64)  # preemptions
    for _ in range(300):
        if rng.random() < 0.5:
            tenant = rng.choice("abcde")
            sched.add_request(request(tenant, num_prompt=rng.randint(4, 40), max_tokens=6))
        if sched.requests and rng.random() < 0.1:
            victim = rng.choice(list(sched.requests))
            sched.finish_requests([victim], RequestStatus.FINISHED_ABORTED)
        run(sched, 1)
        expected = Counter(r.tenant for r in sched.requests.values())
        assert sched.fair.backlog == dict(expected)
    assert sched.num_preemptions > 0  # the path the test is about was taken
    run(sched, 400)
    assert not sched.requests and sched.fair.backlog == {}


def test_a_small_weight_tenant_is_not_starved_by_a_large_one():
    sched = fair_scheduler()
    for _ in range(300):
        sched.add_request(request("whale", weight=100.0))
    run(sched, 5)
    minnow = request("minnow", weight=1.0)
    sched.add_request(minnow)
    run(sched, 40)
    assert minnow.is_finished  # 8 prompt + 8 output tokens: served within a few dozen steps


def test_interactive_goes_before_batch_and_batch_yields_a_full_batch():
    sched = fair_scheduler()
    for _ in range(20):
        sched.add_request(request("t", service_class=1, max_tokens=50))
    run(sched, 3)
    assert len(sched.running) == 4 and all(r.service_class == 1 for r in sched.running)
    chat = request("t", service_class=0, max_tokens=4)  # same tenant, interactive class
    sched.add_request(chat)
    out, _ = step(sched)
    assert chat in out.new_requests  # a batch request yielded its place the next step
    assert len(out.preempted_requests) == 1 and out.preempted_requests[0].service_class == 1


def test_batch_runs_when_no_interactive_request_waits():
    sched = fair_scheduler()
    work = [request("t", service_class=1) for _ in range(4)]
    for r in work:
        sched.add_request(r)
    out, _ = step(sched)
    assert out.new_requests == work  # work-conserving: the low class fills an idle batch


def test_priority_orders_only_inside_a_tenant():
    vtc = VirtualTokenCounter()
    vtc.counters = {"a": 100.0, "b": 0.0}
    queue = FairQueue(vtc)
    urgent, plain = request("a", priority=-100), request("b")
    low, high = request("b", priority=5), request("b", priority=-5)
    for r in (urgent, plain, low, high):
        queue.add(r)
    assert queue.peek() is high  # b is under a: a's low priority value does not jump tenants
    assert [queue.pop() for _ in range(4)] == [high, plain, low, urgent]


def test_kv_pressure_preempts_the_tenant_most_over_its_share():
    # 12 blocks of 4 tokens; four requests of 8 prompt tokens need 8 blocks, and grow.
    sched = fair_scheduler(
        num_blocks=12, max_num_seqs=4, max_model_len=48, enable_prefix_caching=False
    )
    hog = [request("hog", max_tokens=40) for _ in range(2)]
    for r in hog:
        sched.add_request(r)
    run(sched, 6)
    # Ten times hog's weight: whatever each computes, hog stays the one over its share.
    other = [request("other", max_tokens=40, weight=10.0) for _ in range(2)]
    for r in other:
        sched.add_request(r)
    for _ in range(20):
        out, _ = step(sched)
        for victim in out.preempted_requests:
            # Never one of "other" while a request of "hog" still runs.
            assert victim.tenant == "hog" or all(r.tenant == "other" for r in sched.running)
    assert sched.num_preemptions >= 2


def test_one_tenant_alone_fills_the_batch_whatever_its_counter():
    sched = fair_scheduler()
    sched.fair.counters["solo"] = 1e9
    for _ in range(10):
        sched.add_request(request("solo"))
    out, _ = step(sched)
    assert len(out.new_requests) == 4


def test_an_unknown_service_class_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="interactive, batch"):
        service_class_rank("gold")
    assert (service_class_rank(""), service_class_rank("batch")) == (0, 1)


def test_aborting_a_waiting_request_leaves_the_queue_consistent():
    sched = fair_scheduler(max_num_seqs=1)
    a, b, c = request("a"), request("b"), request("b")
    for r in (a, b, c):
        sched.add_request(r)
    sched.finish_requests([b.request_id], RequestStatus.FINISHED_ABORTED)
    assert len(sched.waiting) == 2 and list(sched.waiting) == [a, c]
    run(sched, 40)
    assert a.is_finished and c.is_finished and not sched.waiting


def test_a_new_tenants_prompt_goes_before_the_prefills_of_an_over_share_tenant():
    sched = fair_scheduler(max_num_batched_tokens=64)
    for _ in range(8):
        sched.add_request(request("flood", num_prompt=200))
    step(sched)  # four of the flood run, their prompts in 64-token chunks for many steps
    late = request("late", num_prompt=8)
    sched.add_request(late)
    out, updated = step(sched)
    # One of the flood yields its place, and late's whole prompt is computed this very step
    # (its first token sampled) although the flood's prompt chunks alone would fill the budget.
    assert late in out.new_requests and out.num_scheduled_tokens[late.request_id] == 8
    assert late in updated and late.num_output_tokens == 1
    # The flood's chunks wait for the next step: this one is late's time to first token.
    assert out.total_num_scheduled_tokens == 8
    out, _ = step(sched)
    assert out.total_num_scheduled_tokens == 64  # late decodes, the flood's chunks take the rest


def test_a_step_that_admits_a_tenant_under_its_share_admits_none_of_the_flood():
    """Nor does it admit the flood's waiting requests into its spare budget: their prompt
    chunks would make it as long as the flood's own steps."""
    sched = fair_scheduler(max_num_seqs=16, max_num_batched_tokens=64, fair_step_tokens=0)
    flood = [request("flood", num_prompt=200) for _ in range(8)]
    for r in flood:
        sched.add_request(r)
    step(sched)  # the first of the flood takes the whole budget; the others wait, 15 lines free
    late = request("late", num_prompt=8)
    sched.add_request(late)
    out, _ = step(sched)
    assert out.new_requests == [late] and out.total_num_scheduled_tokens == 8
    # The flood's chunks fill the next steps again; late decodes (charged its 8 prompt tokens
    # it is one step over the flood, then under it again, so its decode goes first).
    outs = [step(sched)[0] for _ in range(2)]
    assert [o.total_num_scheduled_tokens for o in outs] == [64, 64]
    assert [o.num_scheduled_tokens.get(late.request_id) for o in outs] == [None, 1]


def test_a_step_with_prompt_work_of_two_tenants_computes_a_capped_share_of_prompt_tokens():
    sched = fair_scheduler(max_num_batched_tokens=256, fair_step_tokens=64)
    for _ in range(8):
        sched.add_request(request("flood", num_prompt=200))
    out, _ = step(sched)
    assert out.total_num_scheduled_tokens == 256  # one tenant alone: the whole budget

    late = request("late", num_prompt=200, max_tokens=4)
    sched.add_request(late)
    out, _ = step(sched)
    # late's prompt cut to the cap, none of the flood's chunks (they go after late's
    # admission): a short step. The first of the flood finished its prompt in the first step
    # and decodes.
    assert out.num_scheduled_tokens[late.request_id] == 64
    assert prompt_tokens(out) == 64 and out.total_num_scheduled_tokens == 65
    while late.num_output_tokens == 0:  # both lanes have prompt work: every step is capped
        out, _ = step(sched)
        assert 0 < prompt_tokens(out) <= 64
    out, _ = step(sched)
    # late only decodes now (a decode is never cut): the flood's prompt chunks are the step's
    # only prompt work and take the whole budget again.
    assert out.num_scheduled_tokens[late.request_id] == 1
    assert out.total_num_scheduled_tokens == 256 and prompt_tokens(out) > 64

    # A waiting request of a second tenant is enough: its lane shares the next step.
    sched.add_request(request("other", num_prompt=8))
    out, _ = step(sched)
    assert prompt_tokens(out) <= 64


def test_the_same_tenants_batch_lines_share_steps_with_its_interactive_prompt():
    """Lanes are (class, tenant): a batch's prompt chunks do not fill the step that carries an
    interactive request of the same tenant."""
    sched = fair_scheduler(max_num_batched_tokens=256, fair_step_tokens=64)
    for _ in range(8):
        sched.add_request(request("acme", num_prompt=200, service_class=1))
    step(sched)
    chat = request("acme", num_prompt=8)
    sched.add_request(chat)
    out, _ = step(sched)
    # The chat's prompt alone: the batch lines' prompt chunks wait for the next step.
    assert out.num_scheduled_tokens[chat.request_id] == 8 and prompt_tokens(out) == 8


def prompt_tokens(out) -> int:
    """Tokens scheduled as prompt chunks (more than one token for a request) in a step."""
    return sum(n for n in out.num_scheduled_tokens.values() if n > 1)


def test_fair_step_tokens_is_checked():
    with pytest.raises(ValueError, match="fair_step_tokens must be >= 0"):
        EngineConfig(model="unused", fair_step_tokens=-1)


def test_while_interactive_requests_arrive_a_step_computes_few_batch_lines(monkeypatch):
    sched = fair_scheduler(max_num_seqs=32, batch_step_seqs=4)
    lines = [request("acme", service_class=1, max_tokens=50) for _ in range(16)]
    for line in lines:
        sched.add_request(line)
    out, _ = step(sched)
    assert len(out.new_requests) == 16  # batch work alone: the whole batch

    chat = request("acme", max_tokens=4)
    sched.add_request(chat)
    out, _ = step(sched)
    batch_scheduled = [r for r in lines if r.request_id in out.num_scheduled_tokens]
    assert chat.request_id in out.num_scheduled_tokens and len(batch_scheduled) == 4
    # The lines left out keep their place and their KV: none was preempted.
    assert all(r.status == RequestStatus.RUNNING for r in lines) and not out.preempted_requests

    monkeypatch.setattr("engine.core.fair_share.INTERACTIVE_WINDOW_S", 0.0)
    out, _ = step(sched)  # no interactive arrival lately: batch lines fill the step again
    assert sum(r.request_id in out.num_scheduled_tokens for r in lines) == 16


def test_batch_step_seqs_is_checked():
    with pytest.raises(ValueError, match="batch_step_seqs must be >= 0"):
        EngineConfig(model="unused", batch_step_seqs=-1)


def test_the_step_that_admits_a_returning_tenant_admits_no_other_lanes_waiting_prompt():
    """A flood that has only just arrived (all of it waiting, nothing running yet) and another
    tenant's short request in the same step: the short request's step carries its prompt
    alone; the flood's first prompt chunks wait one step. Before, they filled the rest of its
    budget (through the API, B's first token then waited for a 2,048-token step)."""
    sched = fair_scheduler(max_num_seqs=8, max_num_batched_tokens=256)
    late = request("late", num_prompt=8)  # arrived first among equal counters: it goes first
    for _ in range(8):
        sched.add_request(request("flood", num_prompt=200))
    sched.add_request(late)
    out, _ = step(sched)
    # Its step is its own.
    assert out.new_requests == [late] and out.total_num_scheduled_tokens == 8
    assert late.num_output_tokens == 1
    out, _ = step(sched)
    assert out.total_num_scheduled_tokens == 256  # the flood takes the whole budget again


def test_two_returning_tenants_share_their_first_step():
    sched = fair_scheduler(max_num_seqs=8, max_num_batched_tokens=256)
    b, c = request("b", num_prompt=8), request("c", num_prompt=8)  # earlier: first among equals
    sched.add_request(request("flood", num_prompt=200))
    sched.add_request(request("flood", num_prompt=200))
    sched.add_request(b)
    sched.add_request(c)
    out, _ = step(sched)
    assert set(out.new_requests) == {b, c} and out.total_num_scheduled_tokens == 16


def test_a_lone_request_added_just_before_a_flood_arriving_with_it_goes_first():
    """The engine's intake adds a batch's tenants with the fewest requests first
    (engine/service/intake_order.py), so a short request that reaches the engine with a flood
    is added just before it. The flood, arriving to a tenant nobody has served yet, is not lifted
    under it: the two are in arrival order, and the short request's step is its own."""
    sched = fair_scheduler(max_num_seqs=8, max_num_batched_tokens=256)
    late = request("late", num_prompt=8)
    sched.add_request(late)
    for _ in range(8):
        sched.add_request(request("flood", num_prompt=200))
    assert sched.fair.counter("flood") == sched.fair.counter("late")
    out, _ = step(sched)
    assert out.new_requests == [late] and out.total_num_scheduled_tokens == 8
    # Once a tenant is being served, one returning from idle still goes ahead of it.
    run(sched, 3)
    lowest = min(sched.fair.counter("late"), sched.fair.counter("flood"))
    sched.add_request(other := request("other", num_prompt=8))
    assert sched.fair.counter("other") == lowest - 1
    out, _ = step(sched)
    assert out.new_requests == [other]
