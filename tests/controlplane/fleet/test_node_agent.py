"""The node agent's bookkeeping, in process and fast: engines are stand-in Python processes
(one that runs until SIGTERM, one that crashes), readiness a status record written by the
test. test_agents.py runs real agents with real engines."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import redis
from django.conf import settings
from django.db import OperationalError

from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.liveness import live_node_names
from controlplane.fleet.models import Node, Replica
from controlplane.fleet.placement import GIB, RUNTIME_OVERHEAD_BYTES
from controlplane.fleet.reconciler import reconcile
from controlplane.launcher import node_agent
from controlplane.launcher.engine_launch import engine_environment, engine_options, gpu_memory_share
from controlplane.launcher.node_agent import AgentSettings, NodeAgent
from controlplane.launcher.process_commands import run_engine_command
from tests.support.engine_status import publish_engine_status

pytestmark = pytest.mark.django_db

State = Replica.State
RUNS_UNTIL_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(0)); "
RUNS_UNTIL_SIGTERM += "time.sleep(60)"
CRASHES = "import sys; print('weights are garbage'); sys.exit(3)"
RUNS_A_WHILE_THEN_CRASHES = "import sys, time; time.sleep(0.5); sys.exit(3)"


@pytest.fixture
def agent(tmp_path, redis_client, monkeypatch):
    ServedModel.objects.create(name="tiny", path="/x", architecture="L", num_parameters=10)
    ServedModel.objects.create(name="crashy", path="/x", architecture="L", num_parameters=10)

    def fake_engine(model_name, **options):
        assert options["engine_id"] and options["cpu_kv_cache_space"] == 1.0
        code = {"crashy": CRASHES, "flaky": RUNS_A_WHILE_THEN_CRASHES}
        return [sys.executable, "-c", code.get(model_name, RUNS_UNTIL_SIGTERM)]

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


def test_crashes_after_a_stable_run_start_a_new_row_and_never_fail_the_replica(
    agent, redis_client, monkeypatch
):
    # The agent allows one restart in a row; this engine runs for 0.5 s, "stable" here.
    monkeypatch.setattr(node_agent, "STABLE_RUN_S", 0.4)
    ServedModel.objects.create(name="flaky", path="/x", architecture="L", num_parameters=10)
    _deploy_and_start(agent, redis_client, name="flaky")
    _sync_until(agent, lambda: _replica("flaky").restarts == 3, what="restarted three times")
    replica = _replica("flaky")
    assert replica.state != State.FAILED and replica.reason.startswith(
        "engine exited with code 3; restart 3 in 0.0s"
    )
    # Crashing before a stable run instead: its next exit is the second in a row, one restart
    # more than it allows.
    monkeypatch.setattr(node_agent, "STABLE_RUN_S", 60.0)
    failed = _sync_until_state(agent, "flaky", State.FAILED)
    assert failed.restarts == 3 and "after 1 restarts in a row" in failed.reason


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


# ---------------------------------------------------------------- GPU pinning


def test_a_gpu_replicas_engine_environment_names_its_gpu_alone():
    base = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    env = engine_environment(2, base)
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["PATH"] == "/usr/bin" and base["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert engine_environment(0, base)["CUDA_VISIBLE_DEVICES"] == "0"
    assert engine_environment(None, base) is None  # a CPU replica inherits the agent's


def test_a_gpu_engine_may_allocate_only_what_placement_reserved_on_its_gpu():
    gpus = [{"name": "A", "memory_bytes": 80 * GIB}, {"name": "B", "memory_bytes": 40 * GIB}]
    deployment = SimpleNamespace(
        device="cuda", dtype="", quantization="", max_model_len=None, max_num_seqs=None,
        cpu_threads=None, kv_cache_gb=8.0,
    )  # fmt: skip
    replica_bytes = 20 * GIB + RUNTIME_OVERHEAD_BYTES  # weights and KV cache: 20 GiB

    def options(gpu_index):
        return engine_options(
            deployment, engine_id="e", redis_url="redis://x", drain_timeout_s=30,
            gpu_index=gpu_index, replica_bytes=replica_bytes, node_gpus=gpus,
        )  # fmt: skip

    assert options(0)["gpu_memory_utilization"] == 0.25
    assert options(1)["gpu_memory_utilization"] == 0.5
    assert options(0)["cpu_kv_cache_space"] is None
    assert "gpu_memory_utilization" not in options(None)  # unpinned: the engine's default
    assert gpu_memory_share(2 * GIB, 3 * GIB) == 0.5  # 1.5 / 3
    assert gpu_memory_share(100 * GIB, 80 * GIB) == 1.0  # never past the engine's bound
    assert gpu_memory_share(GIB, 0) is None
    cpu = SimpleNamespace(**{**vars(deployment), "device": "cpu"})
    cpu_options = engine_options(
        cpu, engine_id="e", redis_url="r", drain_timeout_s=1, gpu_index=0, node_gpus=gpus
    )
    assert "gpu_memory_utilization" not in cpu_options and cpu_options["cpu_kv_cache_space"] == 8


def test_the_gpu_options_are_ones_run_engine_accepts():
    from django.core.management import load_command_class

    parser = load_command_class("controlplane.deployments", "run_engine").create_parser(
        "manage.py", "run_engine"
    )
    argv = run_engine_command("tiny", device="cuda", gpu_memory_utilization=0.25)
    parsed = parser.parse_args(argv[argv.index("run_engine") + 1 :])
    assert (parsed.device, parsed.gpu_memory_utilization) == ("cuda", 0.25)


PRINTS_ITS_GPU = (
    "import os, sys, signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(0)); "
    "print('gpu', os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('CUDA_DEVICE_ORDER'), "
    "sys.argv[1:], flush=True); time.sleep(60)"
)


def test_the_agent_starts_each_gpu_replica_pinned_to_its_own_gpu(
    tmp_path, redis_client, monkeypatch
):
    ServedModel.objects.create(name="tiny", path="/x", architecture="L", num_parameters=10)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = [{"name": "H100", "memory_bytes": 24 * GIB}, {"name": "H100", "memory_bytes": 24 * GIB}]
    monkeypatch.setattr(node_agent, "host_gpus", lambda: gpus)

    def fake_engine(model_name, **options):
        flags = [f"{k}={v}" for k, v in options.items() if k == "gpu_memory_utilization"]
        return [sys.executable, "-c", PRINTS_ITS_GPU, *flags]

    monkeypatch.setattr(node_agent, "run_engine_command", fake_engine)
    agent = NodeAgent(AgentSettings(name="g1", var_dir=tmp_path), redis_client)
    agent.register()
    try:
        services.deployment_deploy(name="tiny", replicas=2, device="cuda", kv_cache_gb=12.0)
        reconcile(redis_client)
        _sync_until(agent, lambda: len(_logged_gpu_lines(tmp_path)) == 2, what="started")
        by_replica = {r.engine_id: r.gpu_index for r in Replica.objects.all()}
        assert sorted(by_replica.values()) == [0, 1]
        for engine_id, gpu in by_replica.items():
            (line,) = _logged_gpu_lines(tmp_path, engine_id)
            # 12 GiB of KV cache and tiny weights, of a 24 GiB GPU: 0.5 of it.
            assert line == f"gpu {gpu} PCI_BUS_ID ['gpu_memory_utilization=0.5']"
    finally:
        agent.supervisor.stop_all()


def _logged_gpu_lines(var_dir, engine_id: str = "") -> list[str]:
    logs = (var_dir / "log").glob(f"engine-{engine_id}*.log")
    return [line for log in logs for line in log.read_text().splitlines() if line[:4] == "gpu "]


IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
)


def test_shutdown_waits_one_drain_timeout_for_all_engines_then_kills_them(
    tmp_path, redis_client, monkeypatch
):
    """The grace period deploy manifests give the agent is drain timeout + the kill margin,
    however many engines it runs: stuck engines are waited for together, not one by one."""
    ServedModel.objects.create(name="tiny", path="/x", architecture="L", num_parameters=10)
    monkeypatch.setattr(
        node_agent, "run_engine_command", lambda *a, **k: [sys.executable, "-c", IGNORES_SIGTERM]
    )
    agent = NodeAgent(AgentSettings(name="n1", var_dir=tmp_path, drain_timeout_s=0.5), redis_client)
    agent.register()
    services.deployment_deploy(name="tiny", replicas=3)
    reconcile(redis_client)

    def all_running() -> bool:
        children = [engine.child for engine in agent.engines.values()]
        return len(children) == 3 and all(c is not None and c.running() for c in children)

    _sync_until(agent, all_running, what="three engines running")
    children = [engine.child for engine in agent.engines.values()]
    started = time.monotonic()
    agent.shutdown()
    took = time.monotonic() - started
    assert not any(child.running() for child in children)
    bound = 0.5 + node_agent.ENGINE_KILL_MARGIN_S
    assert bound - 0.5 <= took < bound + 3  # one shared deadline, not three in a row


def _run_for(target, stop, seconds: float) -> None:
    thread = threading.Thread(target=target, args=(stop,))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(5)


def test_a_redis_outage_is_two_lines_in_the_heartbeat_log_not_a_traceback_a_beat(agent, caplog):
    agent.config.heartbeat_s = 0.02
    real, stop = agent.client, threading.Event()
    agent.client = redis.Redis(port=1)  # nothing listens on port 1
    beating = threading.Thread(target=agent._beat, args=(stop,))

    def lines():
        return [r for r in caplog.records if r.getMessage().startswith("heartbeat")]

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 10
        while len(lines()) < count and time.monotonic() < deadline:
            time.sleep(0.02)

    with caplog.at_level(logging.INFO, logger="controlplane.launcher.node_agent"):
        beating.start()
        wait_for(1)
        time.sleep(0.3)  # more beats fail meanwhile: no more lines
        agent.client = real  # Redis is back
        wait_for(2)
        stop.set()
        beating.join(5)
    lines = lines()
    assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
    assert all(r.exc_info is None for r in lines)
    assert "ConnectionError" in lines[0].getMessage()
    assert "Redis answers again" in lines[1].getMessage()


def test_steps_that_fail_on_the_database_or_redis_log_the_outage_once_and_its_end(
    agent, monkeypatch, caplog
):
    agent.config.heartbeat_s = 0.02
    outcomes = iter([redis.ConnectionError("Redis is loading"), OperationalError("db locked")] * 5)

    def step():
        failure = next(outcomes, None)
        if failure is not None:
            raise failure

    monkeypatch.setattr(agent, "step", step)
    monkeypatch.setattr(agent, "_registered", lambda outage: True)
    monkeypatch.setattr(agent, "_beat", lambda stop: None)
    monkeypatch.setattr(agent, "shutdown", lambda: None)
    with caplog.at_level(logging.INFO, logger="controlplane.launcher.node_agent"):
        _run_for(agent.run, threading.Event(), 0.5)  # ten failing steps, then good ones
    lines = [r for r in caplog.records if r.getMessage().startswith("agent step")]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
    assert all(r.exc_info is None for r in lines)
    assert "the database or Redis answers again" in lines[1].getMessage()


@pytest.mark.django_db(transaction=True)  # the agent registers from its own thread
def test_an_agent_started_before_redis_registers_once_it_answers_with_two_log_lines(
    agent, monkeypatch, caplog
):
    agent.config.heartbeat_s = 0.02
    agent.node, real, stop = None, agent.client, threading.Event()
    agent.client = redis.Redis(port=1)  # nothing listens on port 1
    monkeypatch.setattr(agent, "step", lambda: None)
    monkeypatch.setattr(agent, "_beat", lambda stop: None)
    monkeypatch.setattr(agent, "shutdown", lambda: None)
    running = threading.Thread(target=agent.run, args=(stop,))
    with caplog.at_level(logging.INFO, logger="controlplane.launcher.node_agent"):
        running.start()
        deadline = time.monotonic() + 10
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # more attempts fail meanwhile: no more lines
        agent.client = real
        while agent.node is None and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
        running.join(5)
    assert agent.node is not None
    lines = [r for r in caplog.records if r.getMessage().startswith("registering node n1")]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
    assert all(r.exc_info is None for r in lines)
