"""How a process waits out a Redis outage, on both sides of it (engines and API processes):
which errors mean Redis is away, how soon to try again, and what to log. Torch-free, so the
API imports it too."""

from __future__ import annotations

import logging
import time

import redis

# A thread's pause after a call that failed on Redis before it tries again: short, so that it
# is back at work soon after Redis is (an engine's status record above all, before the copy
# Redis reloaded from its append-only file expires). A refused connection costs nothing.
RETRY_AFTER_S = 0.1
TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError)


class OutageLog:
    """What one thread (or asyncio task) logs of a Redis outage it waits out: a warning at its first failure and
    a line when Redis answers again, with how long it was away; not a line per retry."""

    def __init__(self, logger: logging.Logger, thread: str):
        self.logger, self.thread = logger, thread
        self.failing_since: float | None = None  # monotonic: the outage's first failure

    def failed(self, exc: Exception) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            self.logger.warning("%s: %s (retried until Redis answers)", self.thread, exc)
        else:
            self.logger.debug("%s: %s (retried)", self.thread, exc)

    def answered(self) -> None:
        if self.failing_since is not None:
            down_s = time.monotonic() - self.failing_since
            self.logger.info("%s: Redis answers again (unreachable for %.1fs)", self.thread, down_s)
            self.failing_since = None
