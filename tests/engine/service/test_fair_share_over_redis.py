"""Fair share through a real engine process and a real Redis: a tenant's request sent behind
another tenant's backlog in the stream is served long before that backlog ends."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from engine import protocol
from engine.protocol import FIELD, Keys
from tests.engine.service.support import serve_module_engine, wait_for

MODEL = "tiny-llama"
PREFIX = f"fair{uuid.uuid4().hex[:6]}"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(tiny_llama, redis_server, tmp_path_factory):
    # Two at a time, the fair policy being the service's default.
    options = ("--max-num-seqs", "2", "--status-interval", "0.2", "--status-ttl", "2")
    yield from serve_module_engine(
        tiny_llama, MODEL, redis_server, PREFIX, tmp_path_factory, *options
    )


def _request(frontend: str, rid: str, tenant: str, max_tokens: int) -> bytes:
    message = protocol.GenerateRequest(
        request_id=rid,
        frontend_id=frontend,
        prompt_token_ids=list(range(5, 37)),
        sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
        tenant=tenant,
    )
    return protocol.encode(message)


def _send_a_then_b(client, keys, frontend, backlog, a_tokens, b_id, b_tokens) -> None:
    """Tenant A's ``backlog`` in the stream at once, then one request of tenant B."""
    pipe = client.pipeline()
    for rid in backlog:
        pipe.xadd(keys.requests(MODEL), {FIELD: _request(frontend, rid, "tA", a_tokens)})
    pipe.xadd(keys.requests(MODEL), {FIELD: _request(frontend, b_id, "tB", b_tokens)})
    pipe.execute()


def _finish_order(client, keys, frontend, until: str) -> list[str] | None:
    """The requests finished so far, in order, once ``until`` is among them."""
    batches = [protocol.decode_outputs(f[FIELD]) for _, f in client.xrange(keys.outputs(frontend))]
    done = [d.request_id for b in batches for d in b.deltas if d.finish_reason]
    return done if until in done else None


def test_a_second_tenant_is_served_before_the_first_ones_backlog(engine, redis_server):
    client = redis.Redis.from_url(redis_server.url)
    keys, frontend = Keys(PREFIX), f"fair-{uuid.uuid4().hex[:6]}"
    # 40 x 24 tokens, two at a time: about 20 rounds of 24 steps
    _send_a_then_b(client, keys, frontend, [f"a-{i}" for i in range(40)], 24, "b-0", 8)
    done = wait_for(
        lambda: _finish_order(client, keys, frontend, "b-0"), 120, "tenant B's request to finish"
    )
    num_a_before_b = done.index("b-0")
    # FCFS would finish all 40 first; the fair engine takes B at the next step it can.
    assert num_a_before_b <= 4, done
    assert all(d.startswith("a-") for d in done[:num_a_before_b])
    client.close()


def test_a_returning_tenant_runs_inside_the_floods_steps(engine, redis_server):
    """Step preemption (engine/core/step_preemption.py) in a real engine process: tenant B's
    short requests, sent one at a time while A's long prompts are being computed, get their
    first tokens from steps run between the layers of A's, which the status counts.

    B sends again as soon as its previous request is done, until the status counts a step
    inside or A's flood ends: a fixed number of B's requests fitted a slow machine's flood
    but not a fast one's (the tiny model prefills a 1,000-token prompt in a few ms)."""
    client = redis.Redis.from_url(redis_server.url)
    keys, frontend = Keys(PREFIX), f"inside-{uuid.uuid4().hex[:6]}"
    before = engine.status().num_steps_inside
    flood = [f"flood-{i}" for i in range(200)]
    pipe = client.pipeline()
    for i, rid in enumerate(flood):  # distinct 1,000-token prompts: no prefix-cache hits
        prompt = [(i * 37 + j) % 1000 + 3 for j in range(1000)]
        message = protocol.GenerateRequest(
            request_id=rid,
            frontend_id=frontend,
            prompt_token_ids=prompt,
            sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=2, ignore_eos=True),
            tenant="tA",
        )
        pipe.xadd(keys.requests(MODEL), {FIELD: protocol.encode(message)})
    pipe.execute()

    def finished() -> set[str]:
        batches = [
            protocol.decode_outputs(f[FIELD]) for _, f in client.xrange(keys.outputs(frontend))
        ]
        return {d.request_id for b in batches for d in b.deltas if d.finish_reason}

    def counted() -> bool:
        return engine.status().num_steps_inside > before

    num_b = 0
    while not set(flood) <= finished() and not counted():
        rid = f"inside-b-{num_b}"  # sent once the previous one is done: back from idle
        client.xadd(keys.requests(MODEL), {FIELD: _request(frontend, rid, "tB", 2)})
        wait_for(lambda rid=rid: rid in finished(), 60, f"B's request {num_b}")
        num_b += 1
        time.sleep(0.02)
    # The status is published every 0.2 s: the step that counted may be in the next one.
    wait_for(counted, 10, f"the status to count a step inside ({num_b} requests of B's)")
    wait_for(lambda: set(flood) <= finished(), 120, "A's flood to finish")
    client.close()


def test_with_many_frontends_the_engine_reads_past_a_deeper_burst(engine, redis_server):
    """40 API processes keep a tenant's burst up to 8 x 40 per engine deep in the stream, past
    the default look-ahead (256): the engine, which counts them in Keys.frontends, reads far
    enough to see tenant B's request behind 400 of A's. With the look-ahead fixed at 256 it
    read B only after about 130 of A's had finished."""
    client = redis.Redis.from_url(redis_server.url)
    keys, frontend = Keys(PREFIX), f"many-{uuid.uuid4().hex[:6]}"
    client.zadd(keys.frontends(MODEL), {f"api-{i}": time.time() for i in range(40)})
    grown = 16 + 4 * 8 * 40  # a quarter of the batch (at least 16), then 32 per frontend
    wait_for(lambda: engine.status().queue_bound == grown, 10, "the read-ahead to grow")

    burst = [f"deep-a-{i}" for i in range(400)]
    _send_a_then_b(client, keys, frontend, burst, 40, "deep-b", 4)  # two at a time
    try:
        done = wait_for(
            lambda: _finish_order(client, keys, frontend, "deep-b"),
            120,
            "tenant B's request to finish",
        )
        assert done.index("deep-b") <= 4, done
    finally:  # leave the module's engine idle and at its usual bound for the next test
        client.delete(keys.frontends(MODEL))
        pipe = client.pipeline()
        for rid in burst:
            abort = protocol.AbortRequest(request_id=rid)
            pipe.xadd(keys.aborts(), {FIELD: protocol.encode(abort)})
        pipe.execute()
        wait_for(
            lambda: (s := engine.status()) and s.num_running + s.num_waiting == 0,
            60,
            "the aborted burst to leave the engine",
        )
        wait_for(lambda: engine.status().queue_bound == 16 + 256, 10, "the bound to shrink")
        client.close()
