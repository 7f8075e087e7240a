"""Outputs of requests read whole: the first delta at once, the rest merged at the end."""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from engine import protocol
from engine.service.output_hold import OutputHold
from engine.service.redis_input import NewRequest
from tests.engine.service.support import in_process_service, wait_for
from tests.engine.service.test_service_loop import queued_jobs

PROMPT = [(11 * i) % 400 + 20 for i in range(30)]


@pytest.fixture
def service(tiny_llama, redis_server):
    svc = in_process_service(tiny_llama, redis_server.url, "held", status_interval=0.2)
    yield svc
    svc.redis.close()


def request(request_id: str, *, stream_outputs: bool, max_tokens: int = 12, logprobs=None):
    message = protocol.GenerateRequest(
        request_id=request_id,
        frontend_id="fe",
        prompt_token_ids=PROMPT,
        sampling=protocol.SamplingOptions(
            temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=logprobs
        ),
        stream_outputs=stream_outputs,
    )
    entry_id = f"{int(time.time() * 1000)}-{uuid.uuid4().int % 1000}"
    return NewRequest(entry_id=entry_id, request=message)


def published(service, request_ids: set[str]) -> dict[str, list[protocol.RequestDelta]]:
    """Run the loop until every one of ``request_ids`` finished; the deltas it published."""
    deltas: dict[str, list[protocol.RequestDelta]] = {rid: [] for rid in request_ids}

    def finished() -> bool:
        service.run_once()
        for job in queued_jobs(service):
            for delta in job.outputs.get("fe", []):
                deltas[delta.request_id].append(delta)
        return all(ds and ds[-1].finish_reason for ds in deltas.values())

    wait_for(finished, 30, "every request to finish", interval=0)
    return deltas


def test_a_request_read_whole_gets_its_first_token_at_once_and_the_rest_in_one_delta(service):
    service.inbox.put(request("streamed", stream_outputs=True, logprobs=1))
    service.inbox.put(request("whole", stream_outputs=False, logprobs=1))
    deltas = published(service, {"streamed", "whole"})
    streamed, whole = deltas["streamed"], deltas["whole"]
    assert len(streamed) > 2  # a delta a step (more than a token in a step that speculated)
    first, last = whole
    assert len(first.new_token_ids) == 1 and first.finish_reason is None
    # The same greedy tokens and logprobs as the streamed twin, and the final delta's counts.
    tokens = [t for d in streamed for t in d.new_token_ids]
    assert first.new_token_ids + last.new_token_ids == tokens
    logprobs = [lp.token_id for d in streamed for lp in d.logprobs]
    assert [lp.token_id for lp in first.logprobs + last.logprobs] == logprobs
    assert (last.finish_reason, last.num_output_tokens) == ("length", 12)
    assert last.decode_time is not None and last.num_prompt_tokens == len(PROMPT)
    assert len(service.hold) == 0


def test_a_request_read_whole_still_sends_what_it_holds_every_flush_interval(service):
    now = [0.0]
    service.hold = OutputHold(flush_s=1.0, clock=lambda: now[0])
    service.inbox.put(request("long", stream_outputs=False, max_tokens=40))
    sent: list[tuple[float, protocol.RequestDelta]] = []
    while not (sent and sent[-1][1].finish_reason):
        service.run_once()
        sent += [(now[0], d) for job in queued_jobs(service) for d in job.outputs.get("fe", [])]
        now[0] += 0.25  # a quarter of a second a step
    # The first token at once; then a delta at least every second and a step, the last at the
    # end, every token in one of them.
    times, deltas = zip(*sent, strict=True)
    assert len(deltas[0].new_token_ids) == 1 and len(deltas) > 3
    assert max(b - a for a, b in itertools.pairwise(times)) <= 1.25
    assert sum(len(d.new_token_ids) for d in deltas) == 40
    assert deltas[-1].num_output_tokens == 40


def test_an_aborted_request_read_whole_drops_what_it_held(service):
    service.inbox.put(request("gone", stream_outputs=False, max_tokens=200))
    for _ in range(6):
        service.run_once()
    assert len(service.hold) == 1
    service.inbox.put(protocol.AbortRequest(request_id="gone"))
    service.run_once()
    deltas = [d for job in queued_jobs(service) for d in job.outputs.get("fe", [])]
    assert deltas[-1].finish_reason == "abort"
    assert len(service.hold) == 0


@pytest.mark.parametrize("ending", ["finish", "error"])
def test_the_hold_releases_a_sample_merged_when_it_ends(ending):
    hold = OutputHold(flush_s=10.0, clock=lambda: 0.0)
    for i, token in enumerate([5, 6]):
        delta = protocol.RequestDelta(
            request_id="r", new_token_ids=[token], num_output_tokens=i + 2
        )
        assert hold.take("fe", delta) is None
    end = protocol.RequestDelta(request_id="r", new_token_ids=[7], num_output_tokens=4)
    if ending == "finish":
        end.finish_reason = "stop"
    else:
        end.error = "engine refused"
    released = hold.take("fe", end)
    assert released.new_token_ids == [5, 6, 7] and released.num_output_tokens == 4
    assert len(hold) == 0 and hold.due() == []
