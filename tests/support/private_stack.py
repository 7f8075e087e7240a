"""A platform of its own for tests that kill its parts: Redis, an engine, Daphne.

The session platform's Redis and engine are shared by every other test, so a test that kills
them gets this instead: a private redis-server with an append-only file (as deploy/ runs it,
so a killed Redis restarts with its data), a copy of the session database (its tenants and
keys), its own var folder (usage spools), and engine processes under a fixed ``--engine-id``
(as the Kubernetes manifest runs them), each restartable under the same id.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from controlplane.launcher.process_commands import engine_command
from controlplane.launcher.redis_server import RedisServer
from controlplane.launcher.stack import Stack
from engine.protocol import decode_status
from tests.support.api_platform import CHAT_MODEL, Platform
from tests.support.fresh_daphne import isolated_env
from tests.support.operator_commands import manage
from tests.support.processes import wait_for
from tests.support.sdk_clients import SdkClients


@dataclass
class PrivateStack(SdkClients):
    launcher: Stack  # the processes, as the launcher starts them
    checkpoint: Path
    api_key: str
    base_url: str = ""
    engines: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def workdir(self) -> Path:
        return self.launcher.workdir

    @property
    def redis(self) -> RedisServer:
        return self.launcher.redis

    @property
    def env(self) -> dict[str, str]:
        return self.launcher.env

    @property
    def prefix(self) -> str:
        return self.env["PLATFORM_REDIS_PREFIX"]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url, socket_timeout=5)

    # ------------------------------------------------------------------ engines

    def start_engine(self, engine_id: str, *, wait: bool = True, **options) -> subprocess.Popen:
        command = engine_command(
            self.checkpoint,
            CHAT_MODEL,
            redis_url=self.redis.url,
            engine_id=engine_id,
            **options,
        )
        # A restart under the same id appends to the same log.
        child = self.launcher.start(f"engine-{engine_id}", command, stop_timeout=15)
        process = self.engines[engine_id] = child.process
        if wait:
            self.wait_engine_live(engine_id)
        return process

    def status_key(self, engine_id: str) -> str:
        return f"{self.prefix}:status:{CHAT_MODEL}:{engine_id}"

    def wait_engine_live(self, engine_id: str, timeout: float = 120.0) -> None:
        """Until this process's status record appears (written after its model loaded; a
        record of an earlier life under the same id does not count)."""
        process = self.engines[engine_id]
        log = self.workdir / f"engine-{engine_id}.log"
        client = self.client()

        def live() -> bool:
            raw = client.get(self.status_key(engine_id))
            return raw is not None and decode_status(raw).pid == process.pid

        try:
            wait_for(
                live,
                timeout=timeout,
                what=f"engine {engine_id}",
                process=process,
                log=log,
            )
        finally:
            client.close()

    def kill_engine(self, engine_id: str) -> None:
        process = self.engines.pop(engine_id)
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.launcher.forget(process)

    def engine_log(self, engine_id: str) -> str:
        return (self.workdir / f"engine-{engine_id}.log").read_text(errors="replace")

    # ------------------------------------------------------------------ Redis

    def kill_redis(self) -> None:
        """SIGKILL: no shutdown save; what survives is what the append-only file holds."""
        assert self.redis.process is not None
        self.redis.process.send_signal(signal.SIGKILL)
        self.redis.process.wait()

    def restart_redis(self) -> None:
        self.redis.start()  # same port, same folder: it reloads the append-only file

    def daphne_log(self) -> str:
        return (self.workdir / "daphne.log").read_text(errors="replace")


@contextmanager
def private_stack(served: Platform, workdir: Path) -> Iterator[PrivateStack]:
    """A private Redis and Daphne on a copy of ``served``'s database (no engine yet)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with Stack(workdir) as launcher:
        launcher.start_redis(appendfsync="always")
        # A var folder of its own (usage spools), with the secret key the API keys hash under.
        var_dir = workdir / "var"
        var_dir.mkdir(exist_ok=True)
        shutil.copy2(Path(served.env["PLATFORM_VAR_DIR"]) / "secret_key", var_dir / "secret_key")
        launcher.env = {
            **isolated_env(served, workdir),
            "REDIS_URL": launcher.redis_url,
            "PLATFORM_VAR_DIR": str(var_dir),
        }
        stack = PrivateStack(launcher, served.checkpoint, served.api_key)
        stack.base_url = launcher.start_daphne(timeout=60)
        yield stack


def usage_records(stack: PrivateStack) -> list[dict]:
    """Every UsageRecord of the stack's database after ``manage.py flush_usage``."""
    import json

    manage(stack.env, "flush_usage")
    script = (
        "import json; from controlplane.usage.models import UsageRecord; "
        "print(json.dumps(list(UsageRecord.objects.values("
        "'event_id', 'status', 'completion_tokens', 'finish_reason'))))"
    )
    out = manage(stack.env, "shell", "-c", script)
    return json.loads(out.strip().splitlines()[-1])


def wait_http(base_url: str, path: str, status: int, timeout: float = 20.0) -> float:
    """Seconds until GET ``path`` answers ``status``."""
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}{path}", timeout=5).status_code == status:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{path} did not answer {status} within {timeout}s")
