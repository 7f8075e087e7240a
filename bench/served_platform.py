"""The platform the API benches measure, brought up by the launcher (controlplane.launcher.stack)
as ``bin/serve`` brings it up: a private Redis, a migrated SQLite file with the checkpoint
registered and a key of a "bench" tenant, one engine, Daphne, and any other child a bench adds
(the Batch API's worker, say). Ready when Daphne's /ready says the model is served."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.bench_tenant import register_command
from controlplane.launcher.process_commands import REPO, daphne_command
from controlplane.launcher.redis_server import free_port
from controlplane.launcher.stack import Stack, http_ok
from controlplane.launcher.supervisor import Child


@dataclass
class ServedBench:
    stack: Stack
    base_url: str
    key: str  # the bench tenant's API key
    engine: Child
    api: list[Child]  # every API process (``api_processes``)

    @property
    def daphne(self) -> Child:
        """The first API process (the only one unless ``api_processes`` says more)."""
        return self.api[0]


@contextmanager
def served_platform(
    workdir: Path,
    checkpoint: Path,
    *,
    model_name: str = "bench",
    max_model_len: int = 2048,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    log_prefix: str = "",
    engine_options: dict | None = None,
    extra_models: dict[str, dict] | None = None,
    extra_children: dict[str, list[str]] | None = None,
    daphne_wrapper: list[str] = (),
    api_redis_query: str = "",
    api_processes: int = 1,
    ready_timeout: float = 180.0,
) -> Iterator[ServedBench]:
    """The platform serving ``checkpoint`` as ``model_name``; every child stops after the block.

    ``env``: settings for every process (LOG_LEVEL is WARNING unless given). Logs go to
    ``log_dir`` (default ``workdir``) as ``<log_prefix><name>.log``. ``daphne_wrapper`` runs
    in front of Daphne's command (a profiler); ``api_redis_query`` is appended to the API's
    Redis URL only (``max_connections=300``). ``api_processes``: Daphnes on the port, as
    ``bin/serve --api-processes`` runs them (without a wrapper, Daphne is started as serve
    starts it, on a socket the launcher holds). ``extra_models``: more names for the same
    checkpoint, each served by an engine of its own with those options (``engine-<name>``);
    the platform is ready once each has loaded."""
    log_dir = log_dir or workdir
    stack = Stack(
        workdir,
        database_url=f"sqlite:///{workdir / 'db.sqlite3'}",
        var_dir=workdir / "var",
        log_dir=log_dir,
        env={"LOG_LEVEL": "WARNING", **(env or {})},
    )
    with stack:
        stack.start_redis()
        stack.migrate()
        for name in extra_models or {}:
            subprocess.run(
                register_command(sys.executable, name, checkpoint, max_model_len, key=False),
                cwd=REPO,
                env=stack.env,
                check=True,
            )
        key = subprocess.run(
            register_command(sys.executable, model_name, checkpoint, max_model_len),
            cwd=REPO,
            env=stack.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        engine = stack.start_engine(
            checkpoint,
            model_name,
            name="engine",
            wait=False,
            log=log_dir / f"{log_prefix}engine.log",
            **(engine_options or {}),
        )
        for name, options in (extra_models or {}).items():
            stack.start_engine(
                checkpoint,
                name,
                name=f"engine-{name}",
                wait=False,
                log=log_dir / f"{log_prefix}engine-{name}.log",
                **options,
            )
        for name, command in (extra_children or {}).items():
            stack.start(name, command, log=log_dir / f"{log_prefix}{name}.log")
        api_env = dict(stack.env)
        if api_redis_query:
            api_env["REDIS_URL"] = f"{stack.redis_url}?{api_redis_query}"
        api_log = log_dir / f"{log_prefix}daphne.log"
        if daphne_wrapper:
            if api_processes != 1:
                raise ValueError("a wrapped Daphne runs as one process")
            port = free_port()
            command = [*daphne_wrapper, *daphne_command("127.0.0.1", port)]
            api = [stack.start("daphne", command, log=api_log, env=api_env)]
            base_url = f"http://127.0.0.1:{port}"
        else:
            base_url = stack.start_api(
                "127.0.0.1", 0, processes=api_processes, env=api_env, log=api_log
            )
            api = stack.api_children
        stack.wait_until(
            lambda: http_ok(f"{base_url}/ready"),
            timeout=ready_timeout,
            what=f"the platform serving {model_name} (/ready)",
        )
        for name in extra_models or {}:
            stack.wait_until(
                lambda name=name: stack.engine_live(name),
                timeout=ready_timeout,
                what=f"the engine serving {name}",
            )
        yield ServedBench(stack, base_url, key, engine, api)
