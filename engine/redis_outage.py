"""How a process waits out a Redis outage, on both sides of it (engines and API processes):
which errors mean Redis is away, how soon to try again, what to log, and the engines' thread
that ticks through it (Worker). Torch-free, so the API imports it too."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

# A thread's pause after a call that failed on Redis before it tries again: short, so that it
# is back at work soon after Redis is (an engine's status record above all, before the copy
# Redis reloaded from its append-only file expires). A refused connection costs nothing.
RETRY_AFTER_S = 0.1
TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError)
ERROR_PAUSE_S = 0.5  # a Worker's pause after a tick that failed otherwise (a bug, logged each time)

logger = logging.getLogger(__name__)


class OutageLog:
    """What one thread (or asyncio task) logs of an outage it waits out (Redis', unless
    ``service`` names another): a warning at its first failure and a line when the service
    answers again, with how long it was away; not a line per retry."""

    def __init__(self, logger: logging.Logger, thread: str, *, service: str = "Redis"):
        self.logger, self.thread, self.service = logger, thread, service
        self.failing_since: float | None = None  # monotonic: the outage's first failure

    def failed(self, exc: Exception) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            self.logger.warning(
                "%s: %s (retried until %s answers)", self.thread, _one_line(exc), self.service
            )
        else:
            self.logger.debug("%s: %s (retried)", self.thread, _one_line(exc))

    def answered(self) -> None:
        if self.failing_since is not None:
            down_s = time.monotonic() - self.failing_since
            self.logger.info(
                "%s: %s answers again (unreachable for %.1fs)", self.thread, self.service, down_s
            )
            self.failing_since = None


def warn_failure(logger: logging.Logger, exc: BaseException, message: str, *args) -> None:
    """``message`` as a warning for a call that failed and is not retried here: Redis away
    gives one line with the error (the outage is told on the request path already, and a
    traceback at every call would bury it), anything else its traceback (a bug)."""
    if isinstance(exc, TRANSPORT_ERRORS):
        logger.warning(f"{message}: %s", *args, exc)
    else:
        logger.warning(message, *args, exc_info=exc)


def _one_line(exc: Exception) -> str:
    """The error's class and first line: a database driver's message can span several."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Worker(threading.Thread):
    """A daemon thread that runs ``tick()`` until ``stop()``; every ``interval`` seconds when
    one is given, else back to back (a tick that blocks on a read). A tick that fails on Redis
    is tried again after RETRY_AFTER_S: Redis may be away for a while. An outage is logged
    twice, when it starts and when it ends (with its length), not at every retry."""

    def __init__(self, name: str, tick: Callable[[], None], interval: float = 0.0):
        super().__init__(name=name, daemon=True)
        self.tick, self.interval = tick, interval
        self._stop_event = threading.Event()
        self._outage = OutageLog(logger, name)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        pause = self.interval
        while not self._stop_event.wait(pause):
            try:
                self.tick()
            except redis.RedisError as exc:
                self._outage.failed(exc)
                pause = RETRY_AFTER_S
            except Exception:
                logger.exception("%s failed; retried", self.name)
                pause = self.interval + ERROR_PAUSE_S
            else:
                self._outage.answered()
                pause = self.interval
