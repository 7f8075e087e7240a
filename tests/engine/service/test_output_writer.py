"""The engine's output writer across a Redis kill: nothing dropped, nothing written twice,
backpressure past its bound (issue 15.2). Before, it gave up after five failed tries and
logged "dropped N output jobs"."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest

from controlplane.launcher.redis_server import RedisServer
from engine import protocol
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.protocol import ENGINE_GROUP, FIELD, Keys
from engine.redis_streams import connect
from engine.service import EngineService, ServiceSettings, loop
from engine.service.redis_input import NewRequest
from engine.service.redis_output import OutputWriter, PublishJob
from tests.engine.service.support import wait_for

pytestmark = pytest.mark.slow

BOUND = 4


@pytest.fixture
def server(tmp_path):
    server = RedisServer(tmp_path / "redis", appendfsync="always").start()
    yield server
    server.stop()


def _job(step: int) -> PublishJob:
    job = PublishJob(step=step)
    job.add("fe", protocol.RequestDelta(request_id="r", new_token_ids=[step]))
    return job


def test_jobs_wait_out_a_redis_kill_in_order_and_the_loop_is_held_back(server):
    keys = Keys("w")
    writer = OutputWriter(connect(server.url, retries=0), keys, "m", "e1")
    writer.max_backlog = BOUND
    writer.start()
    writer.submit(_job(0))
    client = connect(server.url)
    wait_for(lambda: client.xlen(keys.outputs("fe")) == 1, 5, "the first write")

    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    for step in range(1, 10):
        writer.submit(_job(step))
    assert writer.congested()  # the loop must stop stepping rather than drop anything
    assert not writer.wait_for_room(0.3)
    wait_for(lambda: writer.outage_s() > 0, 5, "the writer to notice")

    time.sleep(3.5)  # longer than the old writer's five tries took before it gave up
    server.start()  # same port and append-only file
    assert writer.wait_for_room(10)
    wait_for(lambda: writer.backlog == 0, 10, "the backlog to drain")
    writer.close()
    entries = client.xrange(keys.outputs("fe"))
    steps = [
        protocol.decode_outputs(fields[FIELD]).deltas[0].new_token_ids[0] for _, fields in entries
    ]
    assert steps == list(range(10))  # every job, once, in order
    assert writer.outage_s() == 0.0


@pytest.fixture
def service(tiny_llama, server):
    engine = LLMEngine(EngineConfig(model=str(tiny_llama), device="cpu", max_num_seqs=2))
    settings = ServiceSettings(
        model_name="m",
        redis_url=server.url,
        prefix=f"bp{uuid.uuid4().hex[:6]}",
        status_interval=0.2,
        status_ttl=1.0,
    )
    svc = EngineService(engine, settings)
    yield svc
    for thread in (svc.reader, svc.broadcast, svc.heartbeat):
        if thread.is_alive():
            thread.stop(timeout=2)


def _request(request_id: str, max_tokens: int = 400) -> NewRequest:
    request = protocol.GenerateRequest(
        request_id=request_id,
        frontend_id="fe",
        prompt_token_ids=list(range(10, 30)),
        sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
    )
    return NewRequest(entry_id=f"{int(time.time() * 1000)}-0", request=request)


def test_the_loop_stops_stepping_while_its_outputs_cannot_be_written(service):
    # The writer thread is not started: nothing it is given gets written, as in an outage.
    service.writer.max_backlog = 3
    service.inbox.put(_request("a"))
    for _ in range(3):
        service.run_once()
    assert service.writer.congested() and service.num_steps == 3
    for _ in range(5):
        service.run_once()
    assert service.num_steps == 3  # paused, nothing produced and nothing dropped
    service.writer.start()  # Redis takes writes again
    wait_for(lambda: service.writer.backlog == 0, 10, "the writer to catch up")
    service.run_once()
    assert service.num_steps == 4


def test_a_long_outage_ends_started_requests_with_an_error(service, server, monkeypatch):
    # Well under the time 1,500 steps take on any CPU: the request is still running when the
    # outage passes it (with 1 s and 400 tokens, a quiet machine finished the request first).
    monkeypatch.setattr(loop, "OUTAGE_FAIL_S", 0.2)
    service.start()
    service.inbox.put(_request("b", max_tokens=1500))
    while service.num_steps < 3:
        service.run_once()
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    deadline = time.monotonic() + 20
    # The scheduler lets the request go (its blocks freed, no more steps for it); the abort's
    # own delta waits in the engine with the other outputs until Redis takes writes again,
    # and a fast engine fills the writer's backlog, pausing the loop, before the outage
    # threshold passes.
    while service.engine.scheduler.num_unfinished:
        assert time.monotonic() < deadline, "the request kept running through the outage"
        service.run_once()
    server.start()
    client = connect(server.url)
    key = Keys(service.settings.prefix).outputs("fe")

    def deltas():
        batches = [protocol.decode_outputs(f[FIELD]) for _, f in client.xrange(key)]
        return [d for b in batches for d in b.deltas]

    wait_for(lambda: any(d.error for d in deltas()), 10, "the error delta")
    final = [d for d in deltas() if d.finish_reason][-1]
    assert final.error.startswith("Redis was unreachable") and final.finish_reason == "abort"


def test_an_engine_whose_writer_fails_stops_and_leaves_its_request_to_a_survivor(
    service, server, monkeypatch
):
    # A bug in the writer (here: an output it cannot encode) used to end its thread alone: the
    # engine went on stepping and sending heartbeats, and the request's client waited out its
    # silence timeout with nothing to show.
    def unencodable(self, pipe, job):
        raise TypeError("an output the protocol cannot encode")

    monkeypatch.setattr(OutputWriter, "_apply", unencodable)
    client = connect(server.url)
    keys = Keys(service.settings.prefix)
    client.xadd(keys.requests("m"), {FIELD: protocol.encode(_request("c").request)})
    raised: list[BaseException] = []

    def serve():
        try:
            service.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    thread.join(30)
    stuck = thread.is_alive()
    service.stop()  # ends a loop that kept running, so that the test ends too
    assert not stuck, "the engine kept running without its writer"
    assert isinstance(raised[0].__cause__, TypeError)
    # Gone from the live engines at once, rather than when a heartbeat stops...
    assert not client.exists(keys.status("m", service.settings.engine_id))
    # ...and its request still pending under it, for a survivor to take over as from a crash.
    assert client.xpending(keys.requests("m"), ENGINE_GROUP)["pending"] == 1
