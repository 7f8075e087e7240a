"""The loop -> Redis: the output writer thread applies PublishJobs in order, never dropping one.

While Redis is unreachable the write is retried with backoff: a dropped job would let a client
see a normal finish with tokens missing, so the only relief is backpressure (``congested``).
A connection that breaks after EXEC leaves it unknown whether the MULTI ran, so each write also
sets this engine's write marker (Keys.written) to its sequence number, and a retry skips a
write Redis already applied: outputs are never written twice either.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field

import redis

from engine import protocol
from engine.direct_routing import ROUTE_SCRIPT, split_entries
from engine.protocol import ENGINE_GROUP, FIELD, Keys
from engine.service.redis_input import take_all

logger = logging.getLogger(__name__)

# Jobs (about one per engine step) queued before the loop stops stepping.
MAX_BACKLOG_JOBS = 512
RETRY_FIRST_S = 0.05
# Retries back off to this and stay there: tokens flow again at most this long after Redis
# does (a refused connection costs nothing to try again; a timeout paces itself).
RETRY_MAX_S = 0.25
MARKER_TTL_S = 3600
# Output streams of frontends that went away expire instead of lingering.
OUTPUT_STREAM_TTL_S = 3600


@dataclass(slots=True)
class PublishJob:
    """What one loop iteration writes, applied in one MULTI so Redis never sees half of it.

    A request's first output and its ``started`` record go together; its last output, its
    XACK and the removal of its ``started`` record go together.
    """

    outputs: dict[str, list[protocol.RequestDelta]] = field(default_factory=dict)
    started: dict[str, protocol.StartedRecord] = field(default_factory=dict)
    # Request stream entry ids to XACK (direct ones tagged: engine/direct_routing.py).
    done: list[str] = field(default_factory=list)
    requeue: list[protocol.GenerateRequest] = field(default_factory=list)
    # (peer engine id, request): to the peer's direct stream while it lives (hand_over.py).
    moves: list[tuple[str, protocol.GenerateRequest]] = field(default_factory=list)
    idle: protocol.Idle | None = None  # for the model's idle stream (hand_over.py)
    step: int = 0

    def add(self, frontend_id: str, delta: protocol.RequestDelta) -> None:
        self.outputs.setdefault(frontend_id, []).append(delta)

    def abort(self, entry_id: str, request: protocol.GenerateRequest, indexes, **fields) -> None:
        """End samples ``indexes`` of ``request`` with finish reason abort (``error``: why)
        and acknowledge its entry."""
        for index in indexes:
            delta = protocol.RequestDelta(
                request_id=request.request_id, index=index, finish_reason="abort", **fields
            )
            self.add(request.frontend_id, delta)
        self.done.append(entry_id)

    def hand_back(self, entry_id: str, request: protocol.GenerateRequest) -> None:
        """Put the request back on the stream for another engine (draining)."""
        self.requeue.append(request)
        self.done.append(entry_id)

    def hand_over(self, peer: str, entry_id: str, request: protocol.GenerateRequest) -> None:
        """Move the request to ``peer``, which can start it sooner (hand_over.py)."""
        self.moves.append((peer, request))
        self.done.append(entry_id)

    def __bool__(self) -> bool:
        return bool(
            self.outputs or self.started or self.done or self.requeue or self.moves or self.idle
        )


class OutputWriter(threading.Thread):
    """Applies PublishJobs in order; jobs queued while a write is in flight share a round trip."""

    def __init__(self, client: redis.Redis, keys: Keys, model: str, engine_id: str):
        super().__init__(name="engine-output-writer", daemon=True)
        self.client, self.keys, self.engine_id, self.model = client, keys, engine_id, model
        self.requests, self.started = keys.requests(model), keys.started(model, engine_id)
        self.direct = keys.direct_requests(model, engine_id)
        self.max_backlog = MAX_BACKLOG_JOBS
        self._jobs: queue.SimpleQueue[PublishJob | None] = queue.SimpleQueue()
        self.backlog = 0  # jobs submitted and not yet written
        self._room = threading.Condition()
        self._sequence = 0
        # Marker values from an earlier life of this engine id must never match this one's.
        self._boot = os.urandom(6).hex()
        self._marker = keys.written(model, engine_id)
        # time.monotonic() of the first failed write of the current outage; None when healthy.
        self.failing_since: float | None = None
        self._closing = False
        self.failure: Exception | None = None  # what ended the thread, when not close()

    def congested(self) -> bool:
        return self.backlog >= self.max_backlog

    def wait_for_room(self, timeout: float) -> bool:
        """Block up to ``timeout`` until the backlog is under the bound again."""
        with self._room:
            return self._room.wait_for(lambda: not self.congested(), timeout)

    def outage_s(self) -> float:
        """How long writes have been failing, 0 when the last one succeeded."""
        since = self.failing_since
        return 0.0 if since is None else time.monotonic() - since

    def submit(self, job: PublishJob) -> None:
        """Queue a job to write (the loop submits only jobs with something in them)."""
        with self._room:
            self.backlog += 1
            if self.backlog == self.max_backlog:
                logger.warning("%d output writes wait for Redis: steps paused", self.backlog)
        self._jobs.put(job)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (while Redis answers within ``timeout``), then stop."""
        self._closing = True
        self._jobs.put(None)
        self.join(timeout)
        if self.is_alive() or self.backlog:
            why = "the writer failed" if self.failure else "Redis unreachable"
            logger.error("engine stopped with %d output jobs unwritten: %s", self.backlog, why)

    def raise_if_failed(self) -> None:
        """Raise what ended the thread. An engine whose outputs can no longer be written must
        exit, so that its requests fail over as from a crashed engine; before, it went on
        stepping and sending heartbeats, and every client waited out its silence timeout."""
        if self.failure is not None:
            raise RuntimeError("the engine's output writer failed") from self.failure

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a bug, not an outage (_write retries those)
            logger.exception("the output writer failed; the engine stops")
            self.failure = exc
            with self._room:
                self._room.notify_all()

    def _run(self) -> None:
        closing = False
        while not closing:
            jobs = take_all(self._jobs, None)
            closing = None in jobs
            jobs = [j for j in jobs if j is not None]
            self._write(jobs)
            with self._room:
                self.backlog -= len(jobs)
                self._room.notify_all()

    def _apply(self, pipe, job: PublishJob) -> None:
        for frontend_id, deltas in job.outputs.items():
            key = self.keys.outputs(frontend_id)
            batch = protocol.OutputBatch(engine_id=self.engine_id, deltas=deltas, step=job.step)
            pipe.xadd(key, {FIELD: protocol.encode(batch)})
            pipe.expire(key, OUTPUT_STREAM_TTL_S)
        if job.started:
            started = {k: protocol.encode(v) for k, v in job.started.items()}
            pipe.hset(self.started, mapping=started)
        if job.done:  # nothing reads an entry once done: deleted, or streams would only grow
            shared, direct = split_entries(job.done)
            if shared:
                pipe.xack(self.requests, ENGINE_GROUP, *shared)
                pipe.xdel(self.requests, *shared)
            if direct:
                pipe.xack(self.direct, ENGINE_GROUP, *direct)
                pipe.xdel(self.direct, *direct)
            pipe.hdel(self.started, *job.done)
        for request in job.requeue:
            pipe.xadd(self.requests, {FIELD: protocol.encode(request)})
        if job.idle is not None:
            fields, idle = {FIELD: protocol.encode(job.idle)}, self.keys.idle(self.model)
            pipe.xadd(idle, fields, maxlen=protocol.IDLE_STREAM_LEN, approximate=True)
        # To the peer while its status key exists, else shared. EVAL with the script's text:
        # a registered script inside MULTI costs a SCRIPT EXISTS round trip before the write,
        # and moves are rare.
        for peer, request in job.moves:
            status, direct = (
                self.keys.status(self.model, peer),
                self.keys.direct_requests(self.model, peer),
            )
            pipe.eval(
                ROUTE_SCRIPT, 3, status, direct, self.requests, FIELD, protocol.encode(request)
            )

    def _write(self, jobs: list[PublishJob]) -> None:
        if not jobs:
            return
        self._sequence += 1
        sequence = f"{self._boot}:{self._sequence}".encode()
        delay, results = RETRY_FIRST_S, []
        while True:
            try:
                if self.failing_since and self.client.get(self._marker) == sequence:
                    break  # the earlier attempt ran; its reply was lost with the connection
                pipe = self.client.pipeline(transaction=True)
                for job in jobs:
                    self._apply(pipe, job)
                pipe.set(self._marker, sequence, ex=MARKER_TTL_S)
                results = pipe.execute(raise_on_error=False)
                break
            except (redis.ConnectionError, redis.TimeoutError) as exc:
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
