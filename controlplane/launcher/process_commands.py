"""The command line and environment of each platform process, written once.

``manage.py serve`` and the end-to-end test fixtures start the same processes from here. Nothing
here imports Django or torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETTINGS_MODULE = "controlplane.settings"
ASGI_APPLICATION = "controlplane.asgi:application"


def _flags(options: dict[str, object]) -> list[str]:
    """``max_queued=8`` -> ``--max-queued 8``; True is a bare flag; None and False are left out."""
    args: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        args.append("--" + name.replace("_", "-"))
        if value is not True:
            args.append(str(value))
    return args


def _python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def manage_command(*args: str) -> list[str]:
    """``python manage.py ARGS`` (an absolute path: runs from any directory)."""
    return [sys.executable, str(REPO / "manage.py"), *args]


def migrate_command() -> list[str]:
    return manage_command("migrate", "--noinput", "-v", "0")


# Connections the kernel queues before Daphne accepts them (capped by net.core.somaxconn).
# Twisted's default, 50, reset some of a burst of 200 new connections; Daphne has no flag for
# it, so the listening socket is given as a Twisted endpoint string.
DAPHNE_LISTEN_BACKLOG = 2048


def daphne_endpoint(host: str, port: int, *, backlog: int = DAPHNE_LISTEN_BACKLOG) -> str:
    """``tcp:port=8000:interface=127.0.0.1:backlog=2048`` (an IPv6 host's colons escaped)."""
    interface = host.strip("[]").replace(":", r"\:")
    return f"tcp:port={int(port)}:interface={interface}:backlog={int(backlog)}"


def daphne_command(host: str, port: int, *, backlog: int = DAPHNE_LISTEN_BACKLOG) -> list[str]:
    """The API, the admin and the playground: Daphne serving the project's ASGI application."""
    endpoint = daphne_endpoint(host, port, backlog=backlog)
    return _python_module("daphne", "-e", endpoint, ASGI_APPLICATION)


def daphne_socket_command(fd: int) -> list[str]:
    """Daphne serving on a listening socket its parent opened (api_sockets.py), descriptor
    ``fd`` inherited."""
    return _python_module("daphne", "--fd", str(int(fd)), ASGI_APPLICATION)


def engine_command(model_path: str | Path, model_name: str, **service_options) -> list[str]:
    """``python -m engine`` for a checkpoint; ``service_options`` are its flags
    (``redis_url=``, ``device=``, ``max_num_seqs=``, ``max_queued=``, ``engine_id=``, ...)."""
    path_and_name = ["--model-path", str(model_path), "--model-name", model_name]
    return _python_module("engine", *path_and_name, *_flags(service_options))


def run_engine_command(model_name: str, **service_options) -> list[str]:
    """``manage.py run_engine``: the engine for a model registered in the database."""
    return manage_command("run_engine", "--model", model_name, *_flags(service_options))


def pooling_engine_command(
    model_name: str, model_path: str | Path | None = None, **options
) -> list[str]:
    """``python -m engine.pooling``: batched embeddings, no KV cache; without ``model_path``,
    the bundled all-MiniLM-L6-v2. ``options``: ``redis_url=``, ``device=``."""
    path = ["--model-path", str(model_path)] if model_path is not None else []
    return _python_module("engine.pooling", *path, "--model-name", model_name, *_flags(options))


def celery_worker_command(*, beat_schedule: str | Path | None = None, **options) -> list[str]:
    """One solo-pool Celery worker; with ``beat_schedule``, beat runs inside it (so exactly one
    process runs the periodic usage flush). ``options``: ``loglevel=``, ``concurrency=``."""
    beat = ["--beat", "--schedule", str(beat_schedule)] if beat_schedule is not None else []
    return _python_module(
        "celery", "-A", "controlplane", "worker", "--pool", "solo", *beat, *_flags(options)
    )


def celery_batch_worker_command(**options) -> list[str]:
    """The Batch API's worker: one solo-pool worker on the ``batches`` queue only, so a batch
    that runs for an hour never holds up the usage flush or adapter jobs of the other worker.
    ``options``: ``loglevel=``."""
    return _python_module(
        "celery",
        "-A",
        "controlplane",
        "worker",
        "--pool",
        "solo",
        "--queues",
        "batches",
        "--hostname",
        "batches@%h",
        *_flags(options),
    )


def platform_environment(
    *,
    redis_url: str,
    redis_prefix: str | None = None,
    database_url: str | None = None,
    var_dir: str | Path | None = None,
) -> dict[str, str]:
    """The whole environment of a platform process: this process's, with where Redis, the key
    prefix, the database and the var folder are. A setting left None is inherited (or takes
    its default in controlplane.settings)."""
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    given = {
        "REDIS_URL": redis_url,
        "PLATFORM_REDIS_PREFIX": redis_prefix,
        "DATABASE_URL": database_url,
        "PLATFORM_VAR_DIR": var_dir,
    }
    env.update({name: str(value) for name, value in given.items() if value is not None})
    env["PYTHONUNBUFFERED"] = "1"  # logs reach their files as they are written
    # Python keeps the bytecode of what a process imports (bin/bootstrap installs without
    # compiling: bin/serve and bin/test unset this for the same reason). A bench run from a
    # shell that sets it started every engine by compiling torch and the rest from source:
    # 1,106 modules, about 4 s of CPU per engine on the 2-core EPYC.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
