"""``manage.py serve``: the whole platform in one command, for development and demos.

Migrates the database, starts Redis (unless REDIS_URL is set), converts and registers the demo
chat model (SmolLM2-135M-Instruct, once) when no chat model is configured, creates the admin
user and a demo tenant with a key on the first run, starts a node agent for this host (every
served model, chat or embeddings, is a fleet deployment of one replica, which the agent runs
and restarts if it crashes: local_fleet.py), a Celery worker and Daphne, waits until they
answer, and prints how to reach them. A child that exits while the platform runs is started
again (restarts.py), and so is the private Redis. Ctrl-C or SIGTERM stops every child process
in reverse order: Daphne first, then Celery, then the agent (its engines drain), Redis. While
it runs, var/run/redis.json says where its Redis is, so commands typed in another shell reach
it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from controlplane.adapters.engine_sync import registry_reconcile
from controlplane.common.platform_location import (
    find_running_platform,
    forget_running_platform,
    point_settings_at_redis,
    record_running_platform,
)
from controlplane.deployments.services import ModelRegistrationError
from controlplane.launcher.first_run import (
    EMBEDDING_MODEL,
    ensure_demo_models,
    ensure_first_run_setup,
)
from controlplane.launcher.local_fleet import (
    AGENT_STOP_TIMEOUT_S,
    ReplicaWatch,
    agent_command,
    declare_deployments,
    wait_until_ready,
)
from controlplane.launcher.process_commands import (
    celery_batch_worker_command,
    celery_worker_command,
)
from controlplane.launcher.progress import Progress
from controlplane.launcher.restarts import GaveUp, Restarter
from controlplane.launcher.stack import Stack, StartupError, http_ok

logger = logging.getLogger(__name__)

# How often serve, once up, reads its deployments' replicas to print what changed.
REPLICA_WATCH_S = 2.0


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop()


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class Command(BaseCommand):
    help = "Run the whole platform (Redis, engine, Celery, Daphne) until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-engine", action="store_true", help="do not start engines (API and admin only)"
        )
        parser.add_argument(
            "--startup-timeout", type=float, default=180.0, help="seconds to wait for readiness"
        )
        parser.add_argument(
            "--api-processes",
            type=int,
            default=settings.API_PROCESSES,
            help="Daphne processes sharing the API port, for hosts where one process's core "
            "caps the API (default: API_PROCESSES, or 1; docs/operations.md)",
        )

    def handle(self, *args, **opts):
        signal.signal(signal.SIGTERM, _raise_stop)
        signal.signal(signal.SIGINT, _raise_stop)
        var_dir = Path(settings.VAR_DIR)
        self.stack = Stack(
            var_dir,
            redis_prefix=settings.PLATFORM_REDIS_PREFIX,
            var_dir=var_dir,
            log_dir=var_dir / "log",
        )
        try:
            self._run(opts)
        except _Stop:
            self.stdout.write("\nStopping ...")
        except StartupError as exc:
            raise CommandError(f"{exc}\n(logs in {self.stack.log_dir})") from exc
        finally:
            self._shutdown()

    def _run(self, opts):
        host, port = opts["host"], opts["port"]
        if opts["api_processes"] < 1:
            raise CommandError("--api-processes must be at least 1")
        if not _port_free(host, port):
            raise CommandError(f"port {port} on {host} is in use; pass --port to use another")
        var_dir = Path(settings.VAR_DIR)
        running = find_running_platform(var_dir)
        if running is not None:
            raise CommandError(
                f"a platform is already running from {var_dir} (serve pid {running.pid}, "
                f"Redis {running.redis_url}); stop it first"
            )
        stack = self.stack
        stack.log_dir.mkdir(parents=True, exist_ok=True)  # SQLite cannot create its parent
        progress = Progress(total=7)

        with progress.step("Preparing the database") as st:
            call_command("migrate", verbosity=0, interactive=False)
            st["note"] = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]

        with progress.step("Connecting Redis") as st:
            if settings.REDIS_URL_SOURCE == "environment":
                stack.use_redis(settings.REDIS_URL)
                st["note"] = f"using REDIS_URL {settings.REDIS_URL}"
            else:
                # Process wiring, not configuration: the processes serve starts inherit it.
                # An append-only file, as deploy/ runs Redis: a Redis that dies (and that
                # serve starts again) keeps all but the last second of usage and queues.
                os.environ["REDIS_URL"] = stack.start_redis(persist=True, appendfsync="everysec")
                st["note"] = f"started redis-server on port {stack.redis.port}"
        redis_url = stack.redis_url
        # This process read its settings before Redis started; commands in other shells find
        # it through the record.
        point_settings_at_redis(redis_url)
        record_running_platform(var_dir, redis_url=redis_url)

        with progress.step("Checking served models") as st:
            try:
                models = ensure_demo_models(var_dir=var_dir, progress=progress.detail)
            except ModelRegistrationError as exc:
                raise CommandError(f"the demo models cannot be set up: {exc}") from exc
            names = [m.name for m in models]
            st["note"] = ", ".join(names)

        with progress.step("Setting up the admin user and the demo tenant"):
            creds = ensure_first_run_setup(
                credentials_path=var_dir / "credentials.json", served_model_names=names
            )

        deployments = []
        with progress.step("Starting engines, Celery and Daphne") as st:
            registry_reconcile()  # engines start from the database's ready adapters
            if not opts["no_engine"]:
                # Engines run through the fleet: this host's agent starts them.
                deployments = declare_deployments(models)
                stack.start(
                    "agent",
                    agent_command(var_dir),
                    stop_timeout=AGENT_STOP_TIMEOUT_S,  # it drains its engines first
                )
            schedule = var_dir / "celerybeat-schedule"
            stack.start("celery", celery_worker_command(beat_schedule=schedule, loglevel="info"))
            stack.start("celery-batches", celery_batch_worker_command(loglevel="info"))
            stack.start_api(host, port, processes=opts["api_processes"])
            st["note"] = f"logs in {stack.log_dir}"

        base = f"http://{host}:{port}"
        deadline = time.monotonic() + opts["startup_timeout"]
        with progress.step("Waiting for the API to answer"):
            stack.wait_until(
                lambda: http_ok(f"{base}/health", timeout=1),
                timeout=deadline - time.monotonic(),
                what="the API (Daphne)",
            )
        watch = None
        with progress.step("Waiting for the engines to load their models") as st:
            if opts["no_engine"]:
                st["note"] = "skipped (--no-engine)"
            else:
                watch = wait_until_ready(
                    deployments,
                    timeout=deadline - time.monotonic(),
                    alive=stack.check_alive,
                    say=progress.detail,
                )
                st["note"] = f"engine logs in {var_dir / 'agent' / 'log'}"

        self._banner(base, creds, names)
        # From here on, a child that exits is started again (restarts.py), the engines by
        # the agent; serve stops only for one that keeps exiting.
        restarter = Restarter(stack.supervisor, redis=stack.redis, say=self.stdout.write)
        watched_at = time.monotonic()
        while True:
            try:
                restarter.check()
            except GaveUp as exc:
                raise CommandError(str(exc)) from exc
            if watch is not None and time.monotonic() - watched_at >= REPLICA_WATCH_S:
                watched_at = time.monotonic()
                self._report_replicas(watch)
            time.sleep(0.5)

    def _report_replicas(self, watch: ReplicaWatch) -> None:
        """Print each replica's new state (an engine that crashed and is being restarted,
        one that failed), as the wait before the banner did."""
        try:
            lines = watch.all_changes()
        except DatabaseError as exc:  # SQLite busy, PostgreSQL away: next time
            logger.debug("reading the replicas failed: %s", exc)
            return
        for line in lines:
            self.stdout.write(f"  {line}")

    def _banner(self, base: str, creds, names: list[str]) -> None:
        chat_model = next((n for n in names if n != EMBEDDING_MODEL), names[0])
        cred_file = Path(settings.VAR_DIR) / "credentials.json"
        lines = [
            "",
            self.style.SUCCESS("The platform is up."),
            f"  API (OpenAI-compatible)  {base}/v1",
            f"  Admin                    {base}/admin/   "
            + (
                f"user {creds.admin_username}  password {creds.admin_password}"
                if creds.admin_password
                else f"(credentials in {cred_file})"
            ),
            f"  Home                     {base}/",
            f"  Playground               {base}/playground/",
            f"  Metrics                  {base}/metrics   (tenant series: Bearer token in "
            f"{settings.METRICS_TOKEN_FILE})",
            f"  Models                   {', '.join(names)}",
            "  Demo API key             "
            + (creds.demo_api_key or f"(created on the first run; see {cred_file})"),
            "",
            "  from openai import OpenAI",
            f'  client = OpenAI(base_url="{base}/v1", api_key="{creds.demo_api_key or "sk-..."}")',
            f'  client.chat.completions.create(model="{chat_model}", max_tokens=64, '
            'messages=[{"role": "user", "content": "What is the capital of France?"}])',
            "",
            "Press Ctrl-C to stop everything.",
        ]
        self.stdout.write("\n".join(lines))

    def _shutdown(self) -> None:
        # A second Ctrl-C must not interrupt an orderly stop; children die with us anyway.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        forget_running_platform(settings.VAR_DIR)  # first: commands stop reaching a dying Redis
        self.stack.stop(on_stop=lambda name: self.stdout.write(f"  stopping {name}"))
        self.stdout.write("Stopped.")
