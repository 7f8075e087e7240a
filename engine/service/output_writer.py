"""The output writer thread: applies PublishJobs in order and never drops one.

While Redis is unreachable the jobs wait here and the write is retried with backoff until
Redis answers again. Dropping a job would lose tokens in the middle of a stream and let the
client see a normal finish with text missing (issue 15.2), so the only relief valve is
backpressure: past ``max_backlog`` queued jobs the loop stops stepping (``congested``) until
the writer catches up.

A connection that breaks after EXEC was sent leaves it unknown whether the transaction ran.
Every write also sets this engine's write marker to the write's sequence number inside the
same MULTI, so a retry first reads the marker and skips a write Redis already applied:
outputs are never written twice either.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

import redis

from engine.protocol import Keys
from engine.service.redis_io import Channels, PublishJob

logger = logging.getLogger(__name__)

# Jobs (about one per engine step) queued before the loop stops stepping.
MAX_BACKLOG_JOBS = 512
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
MARKER_TTL_S = 3600


def write_marker_key(keys: Keys, model: str, engine_id: str) -> str:
    return f"{keys.prefix}:written:{model}:{engine_id}"


class OutputWriter(threading.Thread):
    """Applies PublishJobs in order; jobs queued while a write is in flight share a round trip."""

    def __init__(self, client: redis.Redis, channels: Channels, *, max_backlog=MAX_BACKLOG_JOBS):
        super().__init__(name="engine-output-writer", daemon=True)
        self.client = client
        self.channels = channels
        self.max_backlog = max_backlog
        self._jobs: queue.SimpleQueue[PublishJob | None] = queue.SimpleQueue()
        self._backlog = 0  # jobs submitted and not yet written
        self._room = threading.Condition()
        self._sequence = 0
        # Marker values from an earlier life of this engine id must never match this one's.
        self._boot = os.urandom(6).hex()
        self._marker = write_marker_key(channels.keys, channels.model, channels.engine_id)
        # time.monotonic() of the first failed write of the current outage; None when healthy.
        self.failing_since: float | None = None
        self._closing = False

    @property
    def backlog(self) -> int:
        return self._backlog

    def congested(self) -> bool:
        return self._backlog >= self.max_backlog

    def wait_for_room(self, timeout: float) -> bool:
        """Block up to ``timeout`` until the backlog is under the bound again."""
        with self._room:
            return self._room.wait_for(lambda: not self.congested(), timeout)

    def outage_s(self) -> float:
        """How long writes have been failing, 0 when the last one succeeded."""
        since = self.failing_since
        return 0.0 if since is None else time.monotonic() - since

    def submit(self, job: PublishJob) -> None:
        if job:
            with self._room:
                self._backlog += 1
            self._jobs.put(job)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (while Redis answers within ``timeout``), then stop."""
        self._closing = True
        self._jobs.put(None)
        self.join(timeout)
        if self.is_alive() or self._backlog:
            logger.error(
                "engine stopped with %d output jobs unwritten: Redis unreachable", self._backlog
            )

    def run(self) -> None:
        closing = False
        while not closing:
            jobs = [self._jobs.get()]
            while True:
                try:
                    jobs.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            closing = None in jobs
            jobs = [j for j in jobs if j is not None]
            if jobs:
                self._write(jobs)
                with self._room:
                    self._backlog -= len(jobs)
                    self._room.notify_all()

    def _write(self, jobs: list[PublishJob]) -> None:
        self._sequence += 1
        sequence = f"{self._boot}:{self._sequence}".encode()
        delay = RETRY_FIRST_S
        results: list = []
        retrying = False
        while True:
            try:
                if retrying and self.client.get(self._marker) == sequence:
                    break  # the earlier attempt ran; its reply was lost with the connection
                pipe = self.client.pipeline(transaction=True)
                for job in jobs:
                    self.channels.apply(pipe, job, self.channels.engine_id)
                pipe.set(self._marker, sequence, ex=MARKER_TTL_S)
                results = pipe.execute(raise_on_error=False)
                break
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                retrying = True
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                    logger.warning("writing outputs failed (%s); retrying until Redis answers", exc)
                if self._closing and self.outage_s() > 5.0:
                    return  # shutting down and Redis stays away: close() reports the loss
                time.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
            except redis.RedisError:
                # Not a transport failure (MULTI refused): retrying would not help.
                logger.exception("writing %d output jobs failed; they are lost", len(jobs))
                return
        if self.failing_since is not None:
            logger.warning(
                "Redis answers again: outputs written after %.1fs of retries", self.outage_s()
            )
            self.failing_since = None
        for result in results:
            # A command that failed inside the transaction (an XACK after the group vanished
            # with a Redis that restarted empty): the outputs around it were written.
            if isinstance(result, Exception):
                logger.warning("a command of an output write failed: %s", result)
