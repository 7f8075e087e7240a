"""The node agent's bookkeeping, in process and fast: engines are stand-in Python processes
(one that runs until SIGTERM, one that crashes), readiness a status record written by the
test. test_agents.py runs real agents with real engines."""

from __future__ import annotations

import sys
import time

import pytest
from django.conf import settings

from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.liveness import live_node_names
from controlplane.fleet.models import Node, Replica
from controlplane.fleet.reconciler import reconcile
from controlplane.launcher import node_agent
from controlplane.launcher.node_agent import AgentSettings, NodeAgent
from tests.support.engine_status import publish_engine_status

pytestmark = pytest.mark.django_db

State = Replica.State
RUNS_UNTIL_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(0)); "
RUNS_UNTIL_SIGTERM += "time.sleep(60)"
CRASHES = "import sys; print('weights are garbage'); sys.exit(3)"


@pytest.fixture
def agent(tmp_path, redis_client, monkeypatch):
    ServedModel.objects.create(name="tiny", path="/x", architecture="L", num_parameters=10)
    ServedModel.objects.create(name="crashy", path="/x", architecture="L", num_parameters=10)

    def fake_engine(model_name, **options):
        assert options["engine_id"] and options["cpu_kv_cache_space"] == 1.0
        return [sys.executable, "-c", CRASHES if model_name == "crashy" else RUNS_UNTIL_SIGTERM]

    monkeypatch.setattr(node_agent, "run_engine_command", fake_engine)
    config = AgentSettings(name="n1", var_dir=tmp_path, max_restarts=1, backoff_s=0.0)
    agent = NodeAgent(config, redis_client)
    agent.register()
    yield agent
    agent.supervisor.stop_all()


def _replica(name: str) -> Replica:
    return Replica.objects.select_related("deployment").get(deployment__name=name)


def _sync_until(agent, done, timeout=10.0, what="") -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not {what} after {timeout}s"
        agent.sync()
        time.sleep(0.05)


def _sync_until_state(agent, name, state) -> Replica:
    _sync_until(agent, lambda: _replica(name).state == state, what=f"{name} {state}")
    return _replica(name)


def _deploy_and_start(agent, redis_client, name="tiny"):
    services.deployment_deploy(name=name, replicas=1)
    reconcile(redis_client)
    agent.sync()
    return _replica(name)


def test_a_placed_replica_starts_loads_and_is_ready_once_its_status_record_is_live(
    agent, redis_client
):
    replica = _deploy_and_start(agent, redis_client)
    assert replica.state == State.STARTING and replica.engine_id.startswith("tiny-r")
    _sync_until_state(agent, "tiny", State.LOADING)
    prefix = settings.PLATFORM_REDIS_PREFIX
    publish_engine_status(redis_client, prefix=prefix, model="tiny", engine_id=replica.engine_id)
    _sync_until_state(agent, "tiny", State.READY)


def test_a_crashing_engine_is_restarted_then_failed_with_its_log_tail(agent, redis_client):
    _deploy_and_start(agent, redis_client, name="crashy")
    _sync_until(agent, lambda: _replica("crashy").restarts == 1, what="restarted")
    first = _replica("crashy")
    assert first.state == State.STARTING and first.reason.startswith(
        "engine exited with code 3; restart 1"
    )
    failed = _sync_until_state(agent, "crashy", State.FAILED)
    assert failed.restarts == 1
    assert "after 1 restarts" in failed.reason and "weights are garbage" in failed.log_tail
    assert agent.engines == {}


def test_a_scaled_down_replica_drains_then_stops(agent, redis_client):
    _deploy_and_start(agent, redis_client)
    child = agent.engines[_replica("tiny").pk].child
    services.deployment_scale(name="tiny", replicas=0)
    reconcile(redis_client)
    assert _replica("tiny").state == State.DRAINING
    _sync_until_state(agent, "tiny", State.STOPPED)
    assert not child.running() and agent.engines == {}


def test_an_undeployed_replicas_engine_is_stopped(agent, redis_client):
    _deploy_and_start(agent, redis_client)
    child = agent.engines[_replica("tiny").pk].child
    services.deployment_undeploy(name="tiny")
    _sync_until(agent, lambda: not agent.engines, what="stopped")
    assert not child.running()


def test_shutdown_stops_engines_and_leaves_the_node_gone(agent, redis_client):
    _deploy_and_start(agent, redis_client)
    child = agent.engines[_replica("tiny").pk].child
    agent.shutdown()
    assert not child.running()
    assert _replica("tiny").state == State.STOPPED
    assert Node.objects.get(name="n1").state == Node.State.GONE
    assert live_node_names(redis_client) == set()
