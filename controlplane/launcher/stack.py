"""A platform brought up in order: Redis, the database, engines, Celery and Daphne, each started
as a supervised child, waited for until it answers, and stopped in reverse order.

``manage.py serve``, the end-to-end test fixtures and the benchmarks in bench/ all bring the
platform up through :class:`Stack`, so there is one way to start a platform process, one
wait-until-ready (:func:`wait_until`, which names the child that died and shows its log) and
one order of shutdown. Nothing here imports Django or torch, so a benchmark script can use it
without setting Django up.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from controlplane.launcher.api_sockets import ApiSocketError, adoptable, listening_sockets
from controlplane.launcher.process_commands import (
    REPO,
    daphne_command,
    daphne_socket_command,
    engine_command,
    manage_command,
    migrate_command,
    platform_environment,
    pooling_engine_command,
)
from controlplane.launcher.redis_server import RedisServer, free_port
from controlplane.launcher.supervisor import Child, Supervisor


class StartupError(RuntimeError):
    """A platform process died while starting, or did not answer in time."""


def wait_until(
    ready: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    children: Iterable[Child] = (),
    poll: float = 0.2,
) -> None:
    """Poll ``ready()`` until it is true. Fails at once, with the last lines of its log, when
    one of ``children`` exits first, and after ``timeout`` seconds with theirs. An exception
    from ``ready`` counts as "not yet" (connection refused while a server starts)."""
    children = list(children)
    deadline = time.monotonic() + timeout
    while True:
        dead = next((child for child in children if not child.running()), None)
        if dead is not None:
            code = dead.process.returncode if dead.process else None
            raise StartupError(
                f"{dead.name} exited with code {code} while waiting for {what}; "
                f"last lines of {dead.log_path}:\n{dead.log_tail()}"
            )
        try:
            if ready():
                return
        except Exception:  # not up yet
            pass
        if time.monotonic() > deadline:
            tails = "".join(f"\nlast lines of {c.log_path}:\n{c.log_tail()}" for c in children)
            raise StartupError(f"{what} not ready after {timeout:.0f}s{tails}")
        time.sleep(poll)


def run_manage(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``manage.py ARGS`` in a subprocess on ``env``; fails with its stderr when it fails."""
    done = subprocess.run(
        manage_command(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise StartupError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when ``url`` answers 200 (the readiness probe for Daphne's /health)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def engine_live(redis_url: str, prefix: str, model: str) -> bool:
    """True once an engine of ``model`` has published its status record (it writes the first
    one after its model has loaded)."""
    import redis

    from controlplane.common.engine_statuses import any_engine_live
    from engine.protocol import Keys

    client = redis.Redis.from_url(redis_url)
    try:
        return any_engine_live(client, Keys(prefix), model=model)
    finally:
        client.close()


def _numbered(log: str | Path, number: int) -> Path:
    """``daphne.log`` -> ``daphne-2.log``: one log per API process."""
    path = Path(log)
    return path.with_name(f"{path.stem}-{number}{path.suffix}")


class Stack:
    """One platform's processes and their shared environment.

    ``workdir`` holds what the platform writes: the Redis data (``redis/``) and the child
    logs (``log_dir``, by default ``workdir`` itself). Settings left None are inherited from
    this process's environment, or take their defaults in controlplane.settings.
    """

    def __init__(
        self,
        workdir: str | Path,
        *,
        redis_prefix: str | None = None,
        database_url: str | None = None,
        var_dir: str | Path | None = None,
        log_dir: str | Path | None = None,
        env: dict[str, str] | None = None,
    ):
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir) if log_dir is not None else self.workdir
        self.supervisor = Supervisor()
        self.redis: RedisServer | None = None
        self._settings = {
            "redis_prefix": redis_prefix,
            "database_url": database_url,
            "var_dir": var_dir,
        }
        self._extra_env = dict(env or {})
        self.env: dict[str, str] = {}
        self.api_sockets: list[socket.socket] = []  # held while the API runs: see start_api
        self.api_children: list[Child] = []

    # ------------------------------------------------------------------ services

    def start_redis(self, *, persist: bool = False, appendfsync: str | None = None) -> str:
        """A private redis-server under ``workdir/redis``: its URL, now in ``env``."""
        self.redis = RedisServer(self.workdir / "redis", persist=persist, appendfsync=appendfsync)
        self.redis.start()
        return self.use_redis(self.redis.url)

    def use_redis(self, url: str) -> str:
        """Run every process of this stack against the Redis at ``url``."""
        self.env = platform_environment(redis_url=url, **self._settings)
        self.env.update(self._extra_env)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return url

    @property
    def redis_url(self) -> str:
        return self.env["REDIS_URL"]

    @property
    def redis_prefix(self) -> str:
        # controlplane.settings' default when the environment names none.
        return self.env.get("PLATFORM_REDIS_PREFIX", "llmp")

    def manage(self, *args: str, timeout: float = 300) -> str:
        """``manage.py ARGS`` in a subprocess on this stack's environment: its stdout."""
        return run_manage(self.env, *args, timeout=timeout).stdout

    def migrate(self) -> None:
        self.manage(*migrate_command()[2:])

    # ------------------------------------------------------------------ children

    def start(
        self,
        name: str,
        args: list[str],
        *,
        ready: Callable[[], bool] | None = None,
        timeout: float = 120.0,
        stop_timeout: float = 15.0,
        log: str | Path | None = None,
        env: dict[str, str] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> Child:
        """Start ``args`` as child ``name`` (log: ``log_dir/<name>.log``, appended to) and,
        given ``ready``, wait until it is true. ``pass_fds``: descriptors it inherits."""
        log_path = Path(log) if log is not None else self.log_dir / f"{name}.log"
        child = Child(
            name,
            args,
            log_path,
            env=env or self.env,
            stop_timeout=stop_timeout,
            cwd=REPO,
            pass_fds=pass_fds,
        )
        self.supervisor.start(child)
        if ready is not None:
            self.wait_until(ready, timeout=timeout, what=name, children=[child])
        return child

    def start_engine(
        self,
        model_path: str | Path,
        model_name: str,
        *,
        name: str | None = None,
        wait: bool = True,
        timeout: float = 180.0,
        log: str | Path | None = None,
        **options,
    ) -> Child:
        """``python -m engine`` for a checkpoint on this stack's Redis; with ``wait``, until it
        has loaded its model. ``options`` are its flags (``max_num_seqs=``, ``engine_id=``)."""
        command = engine_command(model_path, model_name, redis_url=self.redis_url, **options)
        ready = (lambda: self.engine_live(model_name)) if wait else None
        return self.start(
            name or f"engine-{model_name}",
            command,
            ready=ready,
            timeout=timeout,
            stop_timeout=20,  # engines drain on SIGTERM
            log=log,
        )

    def start_pooling_engine(
        self, model_name: str, model_path: str | Path | None = None, *, timeout: float = 180.0
    ) -> Child:
        """The embeddings engine for ``model_name``, waited for until it has loaded."""
        command = pooling_engine_command(model_name, model_path, redis_url=self.redis_url)
        return self.start(
            f"pooling-{model_name}",
            command,
            ready=lambda: self.engine_live(model_name),
            timeout=timeout,
            stop_timeout=20,
        )

    def start_daphne(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        timeout: float = 90.0,
        env: dict[str, str] | None = None,
        log: str | Path | None = None,
        processes: int = 1,
    ) -> str:
        """The API: ``processes`` Daphnes on ``port`` (a free one by default), waited for
        until /health answers: its base URL."""
        base_url = self.start_api(host, port or 0, processes=processes, env=env, log=log)
        self.wait_until(
            lambda: http_ok(f"{base_url}/health"),
            timeout=timeout,
            what="daphne",
            children=self.api_children,
        )
        return base_url

    def start_api(
        self,
        host: str,
        port: int,
        *,
        processes: int = 1,
        env: dict[str, str] | None = None,
        log: str | Path | None = None,
    ) -> str:
        """Start the API's Daphnes on ``host:port`` (0: a free port) and return its base URL
        at once. The listening sockets are this stack's (api_sockets.py): a Daphne restarted
        after a crash takes up the connections queued meanwhile. Several processes share
        django-prometheus's series through a directory (prometheus_client's multiprocess
        mode), so any of them renders the totals of all."""
        if not adoptable(host):
            if processes != 1:
                raise StartupError(f"several API processes need an IPv4 address, not {host}")
            port = port or free_port()
            self.api_children = [self.start("daphne", daphne_command(host, port), env=env, log=log)]
            return f"http://{host}:{port}"
        try:
            self.api_sockets = listening_sockets(host, port, processes)
        except ApiSocketError as exc:
            raise StartupError(str(exc)) from exc
        port = self.api_sockets[0].getsockname()[1]
        env = dict(env or self.env)
        if processes > 1:
            env["PROMETHEUS_MULTIPROC_DIR"] = str(self._fresh_dir("api-metrics"))
        self.api_children = [
            self.start(
                "daphne" if processes == 1 else f"daphne-{number}",
                daphne_socket_command(sock.fileno()),
                env=env,
                log=_numbered(log, number) if log and processes > 1 else log,
                pass_fds=(sock.fileno(),),
            )
            for number, sock in enumerate(self.api_sockets, start=1)
        ]
        return f"http://{host}:{port}"

    def _fresh_dir(self, name: str) -> Path:
        path = self.workdir / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def engine_live(self, model: str) -> bool:
        return engine_live(self.redis_url, self.redis_prefix, model)

    def wait_until(
        self,
        ready: Callable[[], bool],
        *,
        timeout: float,
        what: str,
        children: Iterable[Child] | None = None,
    ) -> None:
        """:func:`wait_until`, watching every child of this stack unless told which."""
        watched = self.supervisor.children if children is None else children
        wait_until(ready, timeout=timeout, what=what, children=watched)

    def first_dead(self) -> Child | None:
        return self.supervisor.first_dead()

    def check_alive(self) -> None:
        """Raise :class:`StartupError`, with its log's last lines, if a child has exited."""
        dead = self.first_dead()
        if dead is not None:
            code = dead.process.returncode if dead.process else None
            raise StartupError(
                f"{dead.name} exited with code {code}; last lines of {dead.log_path}:\n"
                f"{dead.log_tail()}"
            )

    def stop_child(self, child: Child) -> None:
        """Stop one child (SIGTERM, then SIGKILL after its stop timeout) and forget it."""
        self.supervisor.stop(child)

    def forget(self, process: subprocess.Popen) -> None:
        """Stop watching a child that was killed on purpose (a fault test's SIGKILL)."""
        for child in [c for c in self.supervisor.children if c.process is process]:
            self.supervisor.stop(child)

    def stop(self, *, on_stop: Callable[[str], None] | None = None) -> None:
        """The API first, then every other child in reverse start order (engines drain),
        then Redis; ``on_stop`` hears each name before it is stopped."""
        for child in self.api_children:
            if on_stop:
                on_stop(child.name)
            self.supervisor.stop(child)
        self.api_children = []
        # At once: a connection that reached the held socket now would wait, unanswered,
        # while the engines drain; closed, the port refuses it, as a stopped server does.
        for sock in self.api_sockets:
            sock.close()
        self.api_sockets = []
        self.supervisor.stop_all(on_stop=on_stop and (lambda child: on_stop(child.name)))
        if self.redis is not None:
            if on_stop:
                on_stop("redis")
            self.redis.stop()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
