"""Two engines on one stream; SIGKILL one: no request is left unanswered (acceptance 4), and\nthe started ones finish on the survivor, token for token (mid-stream failover)."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import pytest

from engine.protocol import ENGINE_GROUP, Keys
from inference.transport.engine_client import (
    EngineClient,
    EngineError,
    EngineRequest,
    SamplingOptions,
)
from tests.engine.service.support import EngineProcess, NoText, offline_greedy, wait_for

MODEL = "crashy"
MAX_TOKENS = 100
NUM_REQUESTS = 12

pytestmark = pytest.mark.slow


@pytest.fixture
def prefix():
    return f"crash{uuid.uuid4().hex[:6]}"


@pytest.fixture
def engines():
    """Engine processes a test starts; whatever is still running at the end is stopped."""
    started: list[EngineProcess] = []
    yield started
    for proc in started:
        proc.stop(timeout=10)


def start_engine(tiny_llama, redis_server, prefix, log_dir, name) -> EngineProcess:
    return EngineProcess(
        model_path=tiny_llama,
        model_name=MODEL,
        redis_url=redis_server.url,
        prefix=prefix,
        log_dir=log_dir,
        engine_id=name,
        # Small batches, so an engine holds running requests AND claimed, unstarted ones, and
        # works through the twelve requests in several waves.
        extra=[
            *("--max-num-seqs", "2", "--max-queued", "3"),
            *("--status-interval", "0.25", "--status-ttl", "1.5"),
        ],
    )


@pytest.mark.timeout(600)
async def test_sigkill_started_fail_clearly_unstarted_complete_elsewhere(
    tiny_llama, redis_server, prefix, tmp_path, engines
):
    # The victim runs alone until it dies: with no second engine to take requests, it holds
    # started and claimed-but-unstarted work from its first wave until the stream is nearly
    # empty (many steps), so the kill cannot miss that state however fast or loaded the
    # machine is. The survivor starts after the kill and takes over.
    victim = start_engine(tiny_llama, redis_server, prefix, tmp_path, "victim")
    engines.append(victim)
    await asyncio.to_thread(victim.wait_live)
    keys = Keys(prefix)
    # The survivor starts only after the kill: on a loaded machine its start alone can take a
    # minute or more, and the requests wait for it.
    client = EngineClient(redis_server.url, prefix=prefix, silence_timeout=240.0)
    prompts = [[11 + i, 40, 41, 42, 43 + i] for i in range(NUM_REQUESTS)]
    sampling = SamplingOptions(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)

    async def run(i):
        tokens = []
        try:
            async for chunk in client.generate(
                EngineRequest.build(
                    model=MODEL,
                    prompt_token_ids=prompts[i],
                    sampling=sampling,
                    request_id=f"req{i}",
                ),
                NoText(),
            ):
                tokens += chunk.token_ids
        except EngineError as exc:
            return exc
        return tokens

    tasks = [asyncio.create_task(run(i)) for i in range(NUM_REQUESTS)]
    r = victim.redis

    def victim_mid_work():
        started = r.hlen(keys.started(MODEL, "victim"))
        pending = r.xpending_range(keys.requests(MODEL), ENGINE_GROUP, "-", "+", 100, "victim")
        return started >= 1 and len(pending) > started

    def victim_frozen_mid_work():
        # Judged with the victim stopped (SIGSTOP), so the state seen is the state it dies in:
        # checked while it ran, it could start its last claimed request before the kill landed.
        victim.process.send_signal(signal.SIGSTOP)
        time.sleep(0.05)  # let whatever it wrote just before the stop reach Redis
        if victim_mid_work():
            return True
        victim.process.send_signal(signal.SIGCONT)
        return False

    await asyncio.to_thread(wait_for, victim_frozen_mid_work, 60, "the victim to hold work")
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    # What the victim had claimed at its death, and which of those it had started.
    claimed = {
        p["message_id"]
        for p in r.xpending_range(keys.requests(MODEL), ENGINE_GROUP, "-", "+", 100, "victim")
    }
    num_started = r.hlen(keys.started(MODEL, "victim"))
    survivor = start_engine(tiny_llama, redis_server, prefix, tmp_path, "survivor")
    engines.append(survivor)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 300)
    await client.close()

    expected = await asyncio.to_thread(
        offline_greedy, tiny_llama, prompts, [MAX_TOKENS] * NUM_REQUESTS
    )
    # Started requests resumed on the survivor (inference/transport/failover.py), unstarted ones ran
    # there from the start: every request ends with exactly the undisturbed greedy tokens.
    for i, res in enumerate(results):
        assert res == expected[i], f"req{i} wrong after recovery: {res!r}"
    assert num_started >= 1, "the victim should have died while streaming"
    assert len(claimed) > num_started, "some claimed-but-unstarted requests moved on"
    assert survivor.process.poll() is None
    # Nothing left pending, and the dead engine is gone from the registry.
    assert r.xpending(keys.requests(MODEL), ENGINE_GROUP)["pending"] == 0
    assert b"crashy:victim" not in r.smembers(keys.engines())
    # SIGTERM drains the survivor: it exits cleanly and withdraws its status.
    assert survivor.stop() == 0, survivor.log_tail()
    assert not r.exists(survivor.status_key)
