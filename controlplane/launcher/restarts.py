"""What ``manage.py serve`` does while the platform runs: start again a child that exited on
its own (Daphne, a Celery worker, the node agent) and its private Redis, as a service manager
would, instead of stopping the whole platform.

A child that exits is started again after ``backoff_s``, doubling with each exit in a row; one
that ran ``stable_s`` before it exited starts a new row, so exits hours apart never add up.
Past ``max_in_a_row`` restarts in a row it is crash-looping (a port taken, a broken setting):
serve stops with its exit code and the last lines of its log, as it did at the first exit
before. Redis comes back on its port with what its append-only file holds (fsync'd every
second); the engines, the API and Celery reconnect by themselves.

The engines are the node agent's children, restarted by it (controlplane/launcher/node_agent.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controlplane.launcher.redis_server import RedisServer, RedisUnavailable
from controlplane.launcher.supervisor import Child, Supervisor


@dataclass(frozen=True)
class RestartPolicy:
    max_in_a_row: int = 3
    backoff_s: float = 1.0
    stable_s: float = 60.0


class GaveUp(RuntimeError):
    """A child exited more often in a row than the policy restarts it."""


@dataclass
class _Row:
    exits: int = 0
    restart_at: float | None = None  # set while a restart waits out its back-off


@dataclass
class Restarter:
    supervisor: Supervisor
    redis: RedisServer | None = None
    policy: RestartPolicy = RestartPolicy()
    say: Callable[[str], None] = print
    _rows: dict[str, _Row] = field(default_factory=dict)
    _redis_started_at: float = field(default_factory=time.monotonic)

    def check(self) -> None:
        """Restart what has exited and waited out its back-off; raises GaveUp."""
        if self.redis is not None and self.redis.process.poll() is not None:
            self._redis_exited()
        for child in self.supervisor.children:
            if not child.running():
                self._child_exited(child)

    def _child_exited(self, child: Child) -> None:
        self._exited(
            child.name,
            child.process.returncode,
            child.started_at,
            restart=lambda: self.supervisor.restart(child),
            log=f" (log: {child.log_path})",
            gave_up=lambda: f"; last lines of {child.log_path}:\n{child.log_tail()}",
        )

    def _redis_exited(self) -> None:
        self._exited(
            "redis-server",
            self.redis.process.returncode,
            self._redis_started_at,
            restart=self._start_redis,
            log="",
            gave_up=lambda: f"; see {self.redis.workdir / 'redis.log'}",
        )

    def _start_redis(self) -> None:
        self._redis_started_at = time.monotonic()
        try:
            self.redis.start()  # the same port and folder: clients reconnect
        except RedisUnavailable as exc:
            self.say(f"redis-server did not start again: {exc}")

    def _exited(
        self,
        name: str,
        code: int | None,
        started_at: float,
        *,
        restart: Callable[[], None],
        log: str,
        gave_up: Callable[[], str],
    ) -> None:
        """One exit of ``name``: at first sight, its back-off is set (or GaveUp raised, with
        ``gave_up()``'s detail); once the back-off has passed, ``restart()``."""
        row = self._rows.setdefault(name, _Row())
        if row.restart_at is None:
            delay = self._next_delay(row, started_at)
            if delay is None:
                raise GaveUp(
                    f"{name} exited with code {code}, {row.exits} times in a row{gave_up()}"
                )
            self.say(f"{name} exited with code {code}; starting it again in {delay:.0f} s{log}")
            row.restart_at = time.monotonic() + delay
        if time.monotonic() >= row.restart_at:
            row.restart_at = None
            restart()

    def _next_delay(self, row: _Row, started_at: float) -> float | None:
        """The back-off before this exit's restart; None past the policy's limit."""
        stable = time.monotonic() - started_at >= self.policy.stable_s
        row.exits = 1 if stable else row.exits + 1
        if row.exits > self.policy.max_in_a_row:
            return None
        return self.policy.backoff_s * 2 ** (row.exits - 1)
