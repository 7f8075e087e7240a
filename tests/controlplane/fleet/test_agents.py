"""The fleet against real processes, the issue's acceptance points: two node agents (distinct
names and var dirs stand for two hosts) on one SQLite file, the session's Redis and one Daphne,
running real engines of a tiny random-weight checkpoint, with the official openai SDK as the
client (tests/support/fleet_platform.py).

One module-scoped platform serves the tests, in order; each starts from where the last one
left the fleet: ``tiny`` 1 -> 3 replicas, spread over both agents; a broken checkpoint ends
failed after bounded restarts; 3 -> 1 under 16 concurrent streams; a rolling restart to a new
``max_num_seqs`` (and 2 replicas) under the same load; an agent SIGKILLed with its engines.
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime

import pytest

from tests.support.fleet_platform import Agent, AgentTiming, fleet_platform
from tests.support.stream_load import StreamLoad

pytestmark = pytest.mark.slow

LOAD_S = 90  # generous: engines load on 2 busy cores
# Quick beats and a short node TTL so a lost agent is noticed within seconds; engines get a
# drain long enough for the short streams the load tests run to finish.
TIMING = AgentTiming(node_ttl=2, max_restarts=1, backoff=0.2, drain_timeout=60)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, checkpoints):
    workdir = tmp_path_factory.mktemp("fleet")
    broken = shutil.copytree(checkpoints.get("llama"), workdir / "broken")
    models = {"tiny": checkpoints.get("llama"), "broken": broken}
    agents = (Agent("a"), Agent("b"))
    with fleet_platform(workdir, models=models, agents=agents, timing=TIMING) as fleet:
        for weights in broken.glob("*.safetensors"):  # registered, then broken
            weights.write_bytes(b"not a safetensors file")
        # Both deployments at once (one process): the broken one's restarts overlap the load.
        fleet.deploy(("tiny", "--replicas", "1"), ("broken", "--replicas", "1"))
        yield fleet


def _assert_none_failed(load: StreamLoad) -> None:
    assert load.outcomes, "no request ended"
    assert load.failed == [], f"{len(load.failed)} of {len(load.outcomes)} requests failed"


def test_scaling_to_three_runs_ready_replicas_on_both_agents(fleet):
    fleet.wait(lambda: len(fleet.ready("tiny")) == 1, timeout=LOAD_S, what="the first replica")
    fleet.manage("scale", "tiny", "3")
    fleet.wait(lambda: fleet.settled("tiny", 3), timeout=2 * LOAD_S, what="three ready replicas")
    ready = fleet.ready("tiny")
    assert {r["node"] for r in ready} == {"a", "b"}
    assert all(fleet.engine_live("tiny", r["engine_id"]) for r in ready)
    reply = fleet.sdk().completions.create(model="tiny", prompt="hello", max_tokens=4)
    assert reply.choices[0].finish_reason in {"stop", "length"}


def test_a_broken_checkpoint_ends_failed_after_bounded_restarts(fleet):
    fleet.wait(
        lambda: [r["state"] for r in fleet.replicas("broken")] == ["failed"],
        timeout=2 * LOAD_S,
        what="the broken replica to fail",
    )
    (replica,) = fleet.replicas("broken")
    assert replica["restarts"] == 1  # --max-restarts 1: tried twice, then gave up
    assert "engine exited with code" in replica["reason"]
    assert replica["log_tail"].strip()


def test_scaling_three_to_one_under_16_streams_fails_no_request(fleet):
    with StreamLoad(fleet, "tiny", workers=16) as load:
        load.wait_for(16)
        fleet.manage("scale", "tiny", "1")
        fleet.wait(lambda: fleet.settled("tiny", 1), timeout=LOAD_S, what="one replica left")
        seen = len(load.outcomes)
        load.wait_for(seen + 16)  # and it goes on serving on the one left
    _assert_none_failed(load)
    assert [r["state"] for r in fleet.replicas("tiny")].count("stopped") == 2


def test_a_rolling_restart_under_16_streams_fails_no_request(fleet):
    (old,) = fleet.ready("tiny")
    assert fleet.engine_statuses("tiny")[0].max_num_seqs != 8
    with StreamLoad(fleet, "tiny", workers=16) as load:
        load.wait_for(16)
        fleet.manage("deploy", "tiny", "--replicas", "2", "--max-num-seqs", "8")
        fleet.wait(
            lambda: (
                fleet.settled("tiny", 2) and all(r["generation"] == 2 for r in fleet.ready("tiny"))
            ),
            timeout=3 * LOAD_S,
            what="two ready replicas on the new settings",
        )
        seen = len(load.outcomes)
        load.wait_for(seen + 16)
    _assert_none_failed(load)
    ready = fleet.ready("tiny")
    assert {r["node"] for r in ready} == {"a", "b"}
    assert old["id"] not in {r["id"] for r in ready}
    statuses = fleet.engine_statuses("tiny")
    assert sorted(s.engine_id for s in statuses) == sorted(r["engine_id"] for r in ready)
    assert [s.max_num_seqs for s in statuses] == [8, 8]


def test_a_killed_agent_and_its_engines_are_replaced_and_new_requests_see_no_5xx(fleet):
    assert sorted(r["node"] for r in fleet.ready("tiny")) == ["a", "b"]
    with StreamLoad(fleet, "tiny", workers=16) as load:
        load.wait_for(16)
        killed_at = time.time()
        fleet.kill_agent_and_engines("b")
        fleet.wait(
            lambda: [r["node"] for r in fleet.ready("tiny")] == ["a", "a"],
            timeout=30 + LOAD_S,
            what="the replacement replica on agent a",
        )
        seen = len(load.outcomes)
        load.wait_for(seen + 16)
    replacement = fleet.replicas("tiny")[-1]
    placed_at = datetime.fromisoformat(replacement["created_at"]).replace(tzinfo=UTC).timestamp()
    # Noticed (node TTL), and placed on agent a, within 30 s; then it loads.
    assert replacement["node"] == "a" and placed_at - killed_at < 30
    assert ("b", "lost") in {(r["node"], r["state"]) for r in fleet.replicas("tiny")}
    # Streams the killed engine had started end with the failover's error event; every
    # request sent after the kill, and every one refused at all, shows no 5xx.
    assert [o for o in load.outcomes if o.status is not None and o.status >= 500] == []
    after = [o for o in load.outcomes if o.started_at > killed_at]
    assert after and [o for o in after if not o.ok] == []
