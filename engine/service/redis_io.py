"""The service's Redis threads: request reader, broadcast reader, output writer, and the
base of the periodic ones (status publisher, adapter registry watcher).

The busy loop never waits on Redis: these threads feed the Inbox and drain the writer's
queue. Each has its own connection, so a blocking read never delays a write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from engine import protocol
from engine.protocol import ENGINE_GROUP, FIELD, Keys
from engine.service.inbox import AbortEvent, ControlEvent, Inbox, NewRequest

logger = logging.getLogger(__name__)

READ_BLOCK_MS = 500
# Output streams of frontends that went away expire instead of lingering.
OUTPUT_STREAM_TTL_S = 3600


def connect(url: str, *, retries: int = 3) -> redis.Redis:
    """A client that rides out a dropped connection (a Redis restart) with a few quick retries.

    redis-py's default would retry ten times with up to 10 s between tries, stalling a thread
    for a minute; the threads here have their own loops and want to hear of an outage fast.
    ``retries=0`` for a writer that must decide itself whether a failed MULTI ran.
    """
    return redis.Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        socket_connect_timeout=2,
        socket_keepalive=True,
        health_check_interval=30,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def ensure_group(client: redis.Redis, stream: str) -> None:
    """Create the consumer group (and stream) if missing; reads start at the stream's start."""
    try:
        client.xgroup_create(stream, ENGINE_GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


class PeriodicThread(threading.Thread):
    """A daemon thread that calls ``tick()`` every ``interval`` seconds until ``stop()``."""

    def __init__(self, name: str, interval: float):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self._stop_event = threading.Event()

    def tick(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.tick()


@dataclass(slots=True)
class PublishJob:
    """What one loop iteration writes, applied in one MULTI so Redis never sees half of it.

    A request's first output and its ``started`` record go together; its last output, its
    XACK and the removal of its ``started`` record go together.
    """

    outputs: dict[str, list[protocol.RequestDelta]] = field(default_factory=dict)
    started: dict[str, protocol.StartedRecord] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)  # request stream entry ids to XACK
    requeue: list[protocol.GenerateRequest] = field(default_factory=list)
    step: int = 0

    def add(self, frontend_id: str, delta: protocol.RequestDelta) -> None:
        self.outputs.setdefault(frontend_id, []).append(delta)

    def __bool__(self) -> bool:
        return bool(self.outputs or self.started or self.done or self.requeue)


class Channels:
    """Names this engine writes to and reads from."""

    def __init__(self, keys: Keys, model: str, engine_id: str):
        self.keys = keys
        self.model = model
        self.engine_id = engine_id
        self.requests = keys.requests(model)
        self.started = keys.started(model, engine_id)

    def apply(self, pipe, job: PublishJob, engine_id: str) -> None:
        for frontend_id, deltas in job.outputs.items():
            key = self.keys.outputs(frontend_id)
            batch = protocol.OutputBatch(engine_id=engine_id, deltas=deltas, step=job.step)
            pipe.xadd(key, {FIELD: protocol.encode(batch)})
            pipe.expire(key, OUTPUT_STREAM_TTL_S)
        if job.started:
            pipe.hset(self.started, mapping={k: protocol.encode(v) for k, v in job.started.items()})
        if job.done:
            pipe.xack(self.requests, ENGINE_GROUP, *job.done)
            pipe.hdel(self.started, *job.done)
        for request in job.requeue:
            pipe.xadd(self.requests, {FIELD: protocol.encode(request)})


class RequestReader(threading.Thread):
    """Reads the model's request stream through the consumer group, with backpressure.

    It reads only while fewer than ``bound`` requests wait in the engine (``waiting()``) and
    the inbox together: whatever this engine cannot schedule soon stays in the stream for
    other replicas.
    """

    def __init__(
        self,
        client: redis.Redis,
        channels: Channels,
        inbox: Inbox,
        *,
        bound: int,
        waiting: Callable[[], int],
    ):
        super().__init__(name="engine-request-reader", daemon=True)
        self.client = client
        self.channels = channels
        self.inbox = inbox
        self.bound = bound
        self.waiting = waiting
        self.room_changed = threading.Event()
        self._stop_event = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        self.room_changed.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        stream = self.channels.requests
        while not self._stop_event.is_set():
            room = self.bound - self.waiting() - self.inbox.num_requests
            if room <= 0:
                self.room_changed.wait(0.05)
                self.room_changed.clear()
                continue
            try:
                response = self.client.xreadgroup(
                    ENGINE_GROUP,
                    self.channels.engine_id,
                    {stream: ">"},
                    count=room,
                    block=READ_BLOCK_MS,
                )
            except redis.ResponseError as exc:
                if "NOGROUP" in str(exc):  # stream or group deleted under us
                    ensure_group(self.client, stream)
                    continue
                logger.warning("reading %s failed", stream, exc_info=True)
                time.sleep(0.5)
                continue
            except redis.RedisError as exc:
                logger.warning("reading %s failed: %s", stream, exc)  # Redis away: retried
                time.sleep(0.5)
                continue
            for _stream, entries in response or []:
                self.accept(entries)

    def accept(self, entries: list[tuple[bytes, dict | None]]) -> None:
        """Decode entries; malformed ones are logged and acknowledged, aborted ones answered."""
        requests: list[NewRequest] = []
        bad: list[str] = []
        for raw_id, fields in entries:
            entry_id = _text(raw_id)
            data = (fields or {}).get(FIELD)
            if data is None:
                logger.error("request entry %s has no %r field; acknowledged", entry_id, FIELD)
                bad.append(entry_id)
                continue
            try:
                request = protocol.decode_request(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                logger.error("malformed request entry %s acknowledged: %s", entry_id, exc)
                bad.append(entry_id)
                continue
            requests.append(NewRequest(entry_id, request))
        if bad:
            try:
                self.client.xack(self.channels.requests, ENGINE_GROUP, *bad)
            except redis.RedisError:  # still pending: acknowledged when this id restarts
                logger.warning("could not acknowledge malformed entries %s", bad)
        if not requests:
            return
        try:
            aborted = self._aborted_flags(requests)
        except redis.RedisError:
            # The entries are already ours (pending under this consumer): run them rather
            # than lose them; an abort sent meanwhile still arrives on the abort stream.
            logger.warning("could not check abort markers; running the requests anyway")
            aborted = [0] * len(requests)
        for new, was_aborted in zip(requests, aborted, strict=True):
            if was_aborted:
                # Aborted before any engine picked it up: it never runs.
                self.inbox.put(AbortEvent(new.request.request_id))
            self.inbox.put(new)
        self.room_changed.clear()

    def _aborted_flags(self, requests: list[NewRequest]) -> list[int]:
        keys = self.channels.keys
        flags = self.client.exists(*[keys.aborted(r.request.request_id) for r in requests])
        if not flags:  # EXISTS counts; only then look at each
            return [0] * len(requests)
        pipe = self.client.pipeline(transaction=False)
        for r in requests:
            pipe.exists(keys.aborted(r.request.request_id))
        return pipe.execute()


class BroadcastReader(threading.Thread):
    """Reads the abort stream and this model's control stream; every engine sees every entry."""

    def __init__(self, client: redis.Redis, channels: Channels, inbox: Inbox):
        super().__init__(name="engine-broadcast-reader", daemon=True)
        self.client = client
        self.inbox = inbox
        self.streams = {channels.keys.aborts(): None, channels.keys.control(channels.model): None}
        self._stop_event = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        # A few seconds back: an abort sent while this engine started is not missed; the
        # aborted markers cover anything older.
        start = f"{int(time.time() * 1000) - 5000}-0"
        last = dict.fromkeys(self.streams, start)
        while not self._stop_event.is_set():
            try:
                response = self.client.xread(last, count=256, block=READ_BLOCK_MS)
            except redis.RedisError as exc:
                logger.warning("reading control streams failed: %s", exc)  # retried
                time.sleep(0.5)
                continue
            for raw_stream, entries in response or []:
                stream = _text(raw_stream)
                for raw_id, fields in entries:
                    last[stream] = _text(raw_id)
                    self._handle(stream, raw_id, fields)

    def _handle(self, stream: str, entry_id: bytes, fields: dict) -> None:
        try:
            message = protocol.decode_control(fields[FIELD])
        except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            logger.error("malformed control entry %s in %s ignored: %s", entry_id, stream, exc)
            return
        if isinstance(message, protocol.AbortRequest):
            self.inbox.put(AbortEvent(message.request_id))
        else:
            self.inbox.put(ControlEvent(message))
