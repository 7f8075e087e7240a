"""Scale to zero against real processes: the session's Redis, one SQLite file, Daphne and one
node agent running real engines of two tiny checkpoints, driven with the official openai SDK.

The agent offers 1 GiB, and each replica is estimated at 0.75 GiB plus its tiny weights, so
only one engine fits at a time. Deployments, made once the agent and Daphne are up: ``tiny``
(one replica, scale to zero after 3 s idle) and ``tiny2`` (scale to zero, at 0). In order:
``tiny`` unloads once idle; concurrent requests for it wake it once and are all answered, and
the cold start shows on /metrics and in the audit log; with ``tiny`` loaded again (a long
idle timeout this time), a request for ``tiny2`` evicts it and is answered.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import httpx
import pytest

from controlplane.launcher.process_commands import manage_command, platform_environment
from controlplane.launcher.stack import Stack, run_manage
from tests.support.metrics_scrape import Scrape
from tests.support.sdk_clients import SdkClients

pytestmark = pytest.mark.slow

PREFIX = "s2ztest"
AGENT_OPTIONS = (
    *("--heartbeat", "0.5", "--node-ttl", "3", "--max-restarts", "1"),
    *("--backoff", "0.2", "--drain-timeout", "2", "--memory-gb", "1"),
)
ENGINE_OPTIONS = ("--kv-cache-gb", "0.25", "--cpu-threads", "1", "--max-model-len", "256")
LOAD_TIMEOUT_S = 180  # an engine of a tiny model loads in seconds; this machine is shared


class Platform(SdkClients):
    def __init__(self, workdir: Path, redis_url: str):
        self.db_path = workdir / "db.sqlite3"
        self.env = platform_environment(
            redis_url=redis_url,
            redis_prefix=PREFIX,
            database_url=f"sqlite:///{self.db_path}",
            var_dir=workdir / "var",
        )
        self.env["OMP_NUM_THREADS"] = "1"
        self.stack = Stack(workdir, env=self.env)
        self.stack.env = self.env
        self.base_url = ""
        self.api_key = ""

    def manage(self, *args: str) -> str:
        return run_manage(self.env, *args, timeout=120).stdout

    def deploy(self, name: str, *options: str) -> None:
        self.manage("deploy", name, "--scale-to-zero", *options, *ENGINE_OPTIONS)

    def query(self, sql: str, *params) -> list[dict]:
        with sqlite3.connect(self.db_path, timeout=20) as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(sql, params)]

    def replicas(self, deployment: str) -> list[dict]:
        return self.query(
            "SELECT r.state, r.reason, n.name AS node FROM fleet_replica r "
            "JOIN fleet_deployment d ON r.deployment_id = d.id "
            "LEFT JOIN fleet_node n ON r.node_id = n.id WHERE d.name = ? ORDER BY r.id",
            deployment,
        )

    def wanted(self, deployment: str) -> int:
        (row,) = self.query("SELECT replicas FROM fleet_deployment WHERE name = ?", deployment)
        return row["replicas"]

    def ready(self, deployment: str) -> bool:
        return any(r["state"] == "ready" for r in self.replicas(deployment))

    def audit(self, action: str) -> list[dict]:
        rows = self.query(
            "SELECT target_repr, actor_label, details FROM audit_auditevent "
            "WHERE action = ? ORDER BY id",
            action,
        )
        return [{**row, "details": json.loads(row["details"])} for row in rows]

    def wait(self, condition, *, timeout: float, what: str) -> None:
        self.stack.wait_until(condition, timeout=timeout, what=what)

    def metrics(self) -> Scrape:
        response = httpx.get(f"{self.base_url}/metrics", timeout=10)
        response.raise_for_status()
        return Scrape(response.text)


@pytest.fixture(scope="module")
def platform(tmp_path_factory, redis_server, checkpoints):
    workdir = tmp_path_factory.mktemp("scale-to-zero")
    platform = Platform(workdir, redis_server.url)
    setup = (  # one process: migrate, register both models, a tenant
        "from django.core.management import call_command; "
        "from controlplane.deployments.services import served_model_register as r; "
        "call_command('migrate', interactive=False, verbosity=0); "
        f"r(path={str(checkpoints.get('llama'))!r}, name='tiny'); "
        f"r(path={str(checkpoints.get('llama', seed=1))!r}, name='tiny2'); "
        "call_command('create_tenant', 'acme')"
    )
    platform.manage("shell", "-c", setup)
    platform.api_key = platform.manage("create_api_key", "--tenant", "acme").splitlines()[-1]
    agent = manage_command("run_agent", "--name", "solo", "--var-dir", str(workdir / "agent"))
    platform.stack.start("agent-solo", [*agent, *AGENT_OPTIONS])
    platform.base_url = platform.stack.start_daphne(timeout=90)
    platform.deploy("tiny", "--replicas", "1", "--idle-timeout", "3")
    platform.deploy("tiny2", "--replicas", "0", "--idle-timeout", "600")
    yield platform
    platform.stack.stop()


def test_an_idle_scale_to_zero_deployment_unloads(platform):
    platform.wait(lambda: platform.ready("tiny"), timeout=LOAD_TIMEOUT_S, what="tiny ready")
    platform.wait(
        lambda: [r["state"] for r in platform.replicas("tiny")] == ["stopped"],
        timeout=60,
        what="tiny unloaded after its 3 s idle timeout",
    )
    assert platform.wanted("tiny") == 0
    (unload,) = platform.audit("deployment.unload")
    assert unload["target_repr"] == "tiny" and unload["actor_label"].startswith("system")
    assert unload["details"]["idle_s"] >= 3


async def _three_requests(sdk) -> list[str]:
    """A chat completion, a streamed one and a text completion, all at once."""

    async def chat() -> str:
        answer = await sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        return answer.choices[0].finish_reason

    async def streamed() -> str:
        stream = await sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hey"}], max_tokens=4, stream=True
        )
        reasons = [c.choices[0].finish_reason async for c in stream if c.choices]
        return reasons[-1]

    async def completion() -> str:
        answer = await sdk.completions.create(model="tiny", prompt="once upon", max_tokens=4)
        return answer.choices[0].finish_reason

    return list(await asyncio.gather(chat(), streamed(), completion()))


def test_requests_for_an_unloaded_model_wake_it_once_and_are_answered(platform):
    assert platform.wanted("tiny") == 0 and not platform.ready("tiny")
    finish_reasons = asyncio.run(_three_requests(platform.async_sdk(timeout=LOAD_TIMEOUT_S)))
    assert finish_reasons == ["length", "length", "length"]
    (wake,) = platform.audit("deployment.wake")  # three requests, one wake
    assert wake["target_repr"] == "tiny" and wake["details"]["replicas"] == [0, 1]

    def counted() -> bool:
        return ("platform:cold_starts_total", frozenset({("model_name", "tiny")})) in (
            platform.metrics().samples
        )

    platform.wait(counted, timeout=30, what="the cold start on /metrics")
    scrape = platform.metrics()
    (cold_start,) = platform.audit("deployment.cold_start")
    seconds = cold_start["details"]["seconds"]
    assert scrape.value("platform:cold_starts_total", model_name="tiny") == 1
    assert scrape.value("platform:cold_start_seconds_count", model_name="tiny") == 1
    assert scrape.value("platform:cold_start_seconds_sum", model_name="tiny") == pytest.approx(
        seconds, abs=0.01
    )
    assert 0 < seconds < LOAD_TIMEOUT_S
    assert cold_start["details"]["node"] == "solo"


def test_a_model_that_does_not_fit_evicts_the_idle_one(platform):
    platform.deploy("tiny", "--replicas", "1", "--idle-timeout", "600")  # stays loaded now
    platform.wait(lambda: platform.ready("tiny"), timeout=LOAD_TIMEOUT_S, what="tiny ready")
    sdk = platform.sdk(timeout=LOAD_TIMEOUT_S)
    answer = sdk.chat.completions.create(
        model="tiny2", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert answer.choices[0].finish_reason == "length"
    (evict,) = platform.audit("deployment.evict")
    assert evict["target_repr"] == "tiny"
    assert evict["details"]["for"] == "tiny2" and evict["details"]["node"] == "solo"
    assert platform.wanted("tiny") == 0
    # The API admits a request once the engine's status record is live; its agent marks the
    # replica ready at its next step.
    platform.wait(lambda: platform.ready("tiny2"), timeout=30, what="tiny2's replica ready")
    assert [r["node"] for r in platform.replicas("tiny2") if r["state"] == "ready"] == ["solo"]
