"""Who may run inside the step in flight (schedule_inside, engine/core/step_preemption.py),
with hand-made model outputs."""

from __future__ import annotations

from engine.core.fair_share import SERVICE_CLASSES
from engine.core.scheduler_output import SchedulerOutput
from engine.core.step_preemption import schedule_inside
from engine.request import Request, RequestStatus
from engine.sampling_params import SamplingParams
from tests.engine.core.test_fair_share import fair_scheduler, request
from tests.engine.core.test_scheduler import fake_model

BATCH = SERVICE_CLASSES.index("batch")


def flood_step(sched, num=4, num_prompt=40):
    """Tenant A's ``num`` prompts scheduled as the step in flight."""
    for _ in range(num):
        sched.add_request(request("A", num_prompt=num_prompt))
    return sched.schedule()


def test_a_returning_tenants_short_request_runs_alone_inside_a_full_batch():
    sched = fair_scheduler(max_num_seqs=4)
    in_step = flood_step(sched)
    assert len(sched.running) == 4
    b = request("B", num_prompt=8)
    sched.add_request(b)
    out = schedule_inside(sched, [b], in_step)
    assert out.num_scheduled_tokens == {b.request_id: 8}  # its whole prompt, nothing of A's
    assert len(sched.running) == 5 and b not in sched.waiting
    sched.update_from_output(out, fake_model(out))
    assert b.num_output_tokens == 1
    sched.update_from_output(in_step, fake_model(in_step))
    # One over max_num_seqs: the next steps admit nothing until a sequence finishes.
    sched.add_request(request("C"))
    assert not sched.schedule().new_requests


def test_who_may_not_run_inside():
    sched = fair_scheduler(max_num_seqs=4, fair_step_tokens=16)
    in_step = flood_step(sched)
    own = request("A", num_prompt=8)  # the flood's tenant: ranks no higher than its step
    long = request("B", num_prompt=17)  # over fair_step_tokens
    second = request("B", num_prompt=8)  # B is not back from idle: its long request waits
    for r in (own, long, second):
        sched.add_request(r)
    assert schedule_inside(sched, [own, long, second], in_step).is_empty
    assert all(r in sched.waiting for r in (own, long, second))


def test_a_prompt_whose_cached_prefix_the_step_is_writing_waits():
    sched = fair_scheduler(max_num_seqs=4)
    in_step = flood_step(sched, num=1)
    [a] = in_step.new_requests
    # B's prompt starts with A's first 8 tokens: two blocks A's step is writing right now,
    # already in the prefix cache but with no KV yet.
    b = Request(
        "b",
        [*a.prompt_token_ids[:8], 5, 6, 7, 8],
        SamplingParams(max_tokens=4, temperature=0.0),
        max_tokens=4,
        tenant="B",
    )
    sched.add_request(b)
    assert schedule_inside(sched, [b], in_step).is_empty
    assert b.status == RequestStatus.WAITING
    sched.update_from_output(in_step, fake_model(in_step))
    out = sched.schedule()  # once written, they are hits
    assert b in out.new_requests and b.num_cached_tokens == 8


def test_a_tenant_whose_requests_only_decode_runs_its_next_short_one_inside():
    # Tenant B streams short requests back to back: its last one is still decoding, in the
    # step in flight, when the next arrives. That one need not wait for the flood's step.
    sched = fair_scheduler(max_num_seqs=6, fair_step_tokens=16)
    decoding = request("B", num_prompt=8)
    sched.add_request(decoding)
    first = sched.schedule()
    sched.update_from_output(first, fake_model(first))
    in_step = flood_step(sched)
    assert in_step.num_scheduled_tokens[decoding.request_id] == 1  # B only decodes in it
    b = request("B", num_prompt=8)
    sched.add_request(b)
    out = schedule_inside(sched, [b], in_step)
    assert out.num_scheduled_tokens == {b.request_id: 8}


def test_a_tenant_with_a_prompt_still_being_computed_waits_for_the_step():
    sched = fair_scheduler(max_num_seqs=6, fair_step_tokens=16, max_num_batched_tokens=24)
    computing = request("B", num_prompt=40)  # more than a step's budget: chunked
    sched.add_request(computing)
    first = sched.schedule()
    sched.update_from_output(first, fake_model(first))
    in_step = flood_step(sched)
    assert computing.num_tokens - computing.num_computed_tokens > 1  # prompt work left
    b = request("B", num_prompt=8)
    sched.add_request(b)
    assert schedule_inside(sched, [b], in_step).is_empty
    assert b in sched.waiting


def test_a_request_run_inside_rides_beyond_the_seats_and_takes_none_from_the_flood():
    sched = fair_scheduler(max_num_seqs=4)
    in_step = flood_step(sched, num=4, num_prompt=8)
    waiting_a = request("A", num_prompt=8)
    sched.add_request(waiting_a)
    b = request("B", num_prompt=8, max_tokens=50)  # decodes for a long while
    sched.add_request(b)
    out = schedule_inside(sched, [b], in_step)
    assert b.request_id in out.num_scheduled_tokens and b.rides
    sched.update_from_output(out, fake_model(out))
    sched.update_from_output(in_step, fake_model(in_step))
    # One of A's four finishes: its seat goes to A's next request although B still runs.
    [done] = sched.finish_requests(
        [in_step.new_requests[0].request_id], RequestStatus.FINISHED_ABORTED
    )
    assert done.status != RequestStatus.RUNNING
    nxt = sched.schedule()
    assert waiting_a in nxt.new_requests
    assert b in sched.running and len(sched.running) == 5
    # At most max_num_seqs // 4 (here 1) ride at once: C's short request waits its turn.
    c = request("C", num_prompt=8)
    sched.add_request(c)
    assert schedule_inside(sched, [c], nxt).is_empty


def test_a_tenants_interactive_request_runs_inside_a_step_of_its_own_batch():
    # The Batch API beside a tenant's live traffic: its batch lines' prompts are in the step in
    # flight and more of them wait. Its interactive request is the only one of its lane.
    sched = fair_scheduler(max_num_seqs=8, fair_step_tokens=16)  # two may ride at once
    for _ in range(10):
        sched.add_request(request("T", num_prompt=8, service_class=BATCH))
    in_step = sched.schedule()
    assert in_step.num_scheduled_tokens and sched.waiting
    live = request("T", num_prompt=8)
    sched.add_request(live)
    out = schedule_inside(sched, [live], in_step)
    assert out.num_scheduled_tokens == {live.request_id: 8}
    # Two more of the tenant's interactive requests wait: their lane has other work now.
    second, third = request("T", num_prompt=8), request("T", num_prompt=8)
    sched.add_request(second)
    sched.add_request(third)
    assert schedule_inside(sched, [second, third], in_step).is_empty


def test_between_steps_a_newcomer_goes_ahead_only_of_what_the_fair_order_puts_after_it():
    # Between two steps there is no step in flight (an empty SchedulerOutput): a newcomer may
    # run ahead of the batch's next step only where the fair order would take it first.
    sched = fair_scheduler(max_num_seqs=8, fair_step_tokens=16)
    first = flood_step(sched, num=2)
    sched.update_from_output(first, fake_model(first))  # A's two now decode
    c = request("C", num_prompt=8)
    sched.add_request(c)
    out = schedule_inside(sched, [c], SchedulerOutput())
    assert out.num_scheduled_tokens == {c.request_id: 8} and not c.rides  # a seat was free
    assert sched.num_steps_inside == 0  # not inside another step

    sched.add_request(waiting := request("B", num_prompt=40))  # too long to go ahead itself
    again = request("A", num_prompt=8)  # A has had its share: B's prompt comes first
    sched.add_request(again)
    assert sched.fair.rank(again) >= sched.fair.rank(waiting)
    assert schedule_inside(sched, [again], SchedulerOutput()).is_empty
    assert again in sched.waiting


def test_between_steps_a_newcomer_never_rides_beyond_a_full_batch():
    sched = fair_scheduler(max_num_seqs=2, fair_step_tokens=16)
    first = flood_step(sched, num=2)
    sched.update_from_output(first, fake_model(first))  # the batch is full, A's two decode
    c = request("C", num_prompt=8)
    sched.add_request(c)
    # Inside a step it could ride; between two steps it waits for a seat the fair order gives.
    assert schedule_inside(sched, [c], SchedulerOutput()).is_empty
    assert c in sched.waiting and not any(r.rides for r in sched.running)
