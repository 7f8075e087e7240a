"""Redis -> the loop: the request reader and the broadcast reader (aborts, control messages)
fill the Inbox; the heartbeat adds adapter registry snapshots (the hash's records, decoded by
the loop's AdapterRegistry). Each thread has its own connection, so a blocking read never
delays a write."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from engine import protocol
from engine.direct_routing import direct_entry
from engine.protocol import ENGINE_GROUP
from engine.redis_outage import Worker
from engine.redis_streams import as_str, decode_entries, ensure_group, stream_gone

if TYPE_CHECKING:
    from engine.service.loop import EngineService

logger = logging.getLogger(__name__)

READ_BLOCK_MS = 500
# The loop remembers an abort for a request it has not seen this long, for the race in which
# the abort overtakes its request between the two reader threads (engine/service/loop.py).
RECENT_ABORT_S = 60.0
# How far apart an API host's clock and this one's may be: the broadcast reader starts this far
# back, and trusts the abort stream alone with a request's aborts within this margin
# (BroadcastReader.hears_aborts_of).
CLOCK_MARGIN_S = 5.0


@dataclass(slots=True)
class NewRequest:
    entry_id: str  # id in the model's request stream: XACK-ed when the request is done
    request: protocol.GenerateRequest


@dataclass(slots=True)
class RegistrySnapshot:
    """The model's adapter registry hash (name -> encoded AdapterRef) as read at ``read_at``
    (time.monotonic())."""

    records: dict[bytes, bytes]
    read_at: float


# Control messages (AbortRequest, LoadAdapter, UnloadAdapter, Drain) go into the inbox as they
# arrive; the request reader adds an AbortRequest before a request whose abort marker is set.
Event = NewRequest | RegistrySnapshot | protocol.ControlMessage


class Inbox:
    """The queue from the Redis threads to the loop; counts the new requests in it, and those
    taken out since the engine's stats were last read (``settle``), which backpressure needs:
    a request taken is in neither the queue nor the stats until the step after it ends."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.num_requests = 0
        self.num_taken = 0  # new requests taken out since the last ``settle``
        self._later: list[Event] = []  # taken by take_new_requests, for the next take_all
        self._deferred: list[NewRequest] = []  # taken and put back (``defer``): first out

    def put(self, event: Event) -> None:
        if isinstance(event, NewRequest):
            with self._lock:
                self.num_requests += 1
        self._queue.put(event)

    def defer(self, events: list[NewRequest]) -> None:
        """Put new requests taken but not added back, ahead of everything queued since (the
        loop adds a flood a slice at a time: engine/service/intake_order.py)."""
        if events:
            with self._lock:
                self.num_requests += len(events)
                self.num_taken -= len(events)
            self._deferred = events + self._deferred

    def take_all(self, timeout: float = 0.0) -> list[Event]:
        """Everything queued now; waits up to ``timeout`` for the first event if empty."""
        if self._later or self._deferred:
            events = [*self._later, *self._deferred, *take_all(self._queue, 0.0)]
            self._later, self._deferred = [], []
        else:
            events = take_all(self._queue, timeout)
        self._took(sum(isinstance(e, NewRequest) for e in events))
        return events

    def take_new_requests(self) -> list[NewRequest]:
        """Only the new requests queued now; the other events, in their order, come first
        from the next ``take_all`` (one consumer: the loop thread)."""
        new, self._deferred = self._deferred, []
        for event in take_all(self._queue, 0.0):
            (new if isinstance(event, NewRequest) else self._later).append(event)
        self._took(len(new))
        return new

    def _took(self, n: int) -> None:
        with self._lock:
            self.num_requests -= n
            self.num_taken += n

    def settle(self) -> None:
        """The loop read the engine's stats after adding every request taken so far: they
        count those now."""
        with self._lock:
            self.num_taken = 0

    @property
    def num_uncounted(self) -> int:
        """New requests the engine's last stats do not count: queued here, or taken since."""
        with self._lock:  # both at one moment: a request moving between them counts once
            return self.num_requests + self.num_taken


def take_all(q: queue.SimpleQueue, timeout: float | None) -> list:
    """Everything in ``q`` now; waits up to ``timeout`` (None: for ever) for the first item."""
    items = []
    try:
        if timeout is None or timeout > 0:
            items.append(q.get(timeout=timeout))
        while True:
            items.append(q.get_nowait())
    except queue.Empty:
        return items


class RequestReader(Worker):
    """Reads the model's request stream and this engine's direct stream (requests routed here
    for their cached prefix, engine/direct_routing.py) through the consumer group, with
    backpressure: only while the service has room (``EngineService.room``), so what this
    engine cannot schedule soon stays in the shared stream for other replicas."""

    def __init__(self, client: redis.Redis, service: EngineService):
        super().__init__("engine-request-reader", self.read)
        self.client, self.service, self.keys = client, service, service.keys
        self.me, self.stream = service.settings.engine_id, service.requests
        self.direct = service.direct_requests
        self.room_changed = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        self.room_changed.set()
        super().stop(timeout)

    def read(self) -> None:
        room = self.service.room()
        if room <= 0:
            self.room_changed.wait(0.05)
            self.room_changed.clear()
            return
        try:
            response = self.client.xreadgroup(
                ENGINE_GROUP,
                self.me,
                {self.stream: ">", self.direct: ">"},
                count=room,
                block=READ_BLOCK_MS,
            )
        except redis.ResponseError as exc:
            if not stream_gone(exc):
                raise
            # A stream or group deleted under us (Redis restarted empty, a flush).
            ensure_group(self.client, self.stream)
            return ensure_group(self.client, self.direct)
        for stream, entries in response or []:
            self.accept(entries, direct=as_str(stream) == self.direct)

    def accept(self, entries: list[tuple[bytes, dict | None]], *, direct: bool = False) -> None:
        """Decode entries; malformed ones are logged and acknowledged, aborted ones answered.
        Entries of the direct stream go on under their tagged ids (``direct_entry``)."""
        requests, malformed = decode_entries(entries, protocol.decode_request)
        for entry_id, why in malformed.items():
            logger.error("malformed request entry %s acknowledged: %s", entry_id, why)
        if malformed:
            try:
                stream = self.direct if direct else self.stream
                pipe = self.client.pipeline(transaction=False)
                pipe.xack(stream, ENGINE_GROUP, *malformed)
                pipe.xdel(stream, *malformed)  # logged above; nothing else reads it
                pipe.execute()
            except redis.RedisError:  # still pending: acknowledged when this id restarts
                logger.warning("could not acknowledge malformed entries %s", list(malformed))
        if direct:
            requests = [(direct_entry(entry_id), request) for entry_id, request in requests]
        aborted = self.aborted_before_now([request for _, request in requests])
        for entry_id, request in requests:
            if request.request_id in aborted:  # before any engine picked it up: never runs
                self.service.inbox.put(protocol.AbortRequest(request_id=request.request_id))
            self.service.inbox.put(NewRequest(entry_id, request))
        self.room_changed.clear()

    def aborted_before_now(self, requests: list[protocol.GenerateRequest]) -> set[str]:
        """The ids of ``requests`` whose abort marker is set, read only for requests whose
        aborts the abort stream may not have brought (``BroadcastReader.hears_aborts_of``):
        for the others that is one Redis round trip less before their first token."""
        unheard = [r for r in requests if not self.service.broadcast.hears_aborts_of(r)]
        if not unheard:
            return set()
        try:
            pipe = self.client.pipeline(transaction=False)
            for request in unheard:
                pipe.exists(self.keys.aborted(request.request_id))
            marked = pipe.execute()
        except redis.RedisError:
            # The entries are already ours (pending under this consumer): run them rather
            # than lose them; an abort sent meanwhile still arrives on the abort stream.
            logger.warning("could not check abort markers; running the requests anyway")
            return set()
        return {r.request_id for r, was in zip(unheard, marked, strict=True) if was}


class BroadcastReader(Worker):
    """Reads the abort stream and this model's control and idle streams; every engine sees
    every entry (of the idle stream, those written after it started)."""

    def __init__(self, client: redis.Redis, service: EngineService):
        super().__init__("engine-broadcast-reader", self.read)
        self.client, self.inbox, keys = client, service.inbox, service.keys
        # A few seconds back: an abort sent while this engine started is not missed; the
        # aborted markers cover anything older.
        self.since = time.time() - CLOCK_MARGIN_S
        start = f"{int(self.since * 1000)}-0"
        model = service.settings.model_name
        idle = keys.idle(model)
        self.last = {keys.aborts(): start, keys.control(model): start, idle: _end_of(client, idle)}

    def hears_aborts_of(self, request: protocol.GenerateRequest) -> bool:
        """Whether every abort of ``request`` reaches this engine through the abort stream and
        is still remembered when the request is admitted, so that its marker need not be read.
        An abort follows its request's acceptance by the API (``arrival_time``, the API's
        clock): one accepted after this engine started is read here (this reader begins
        CLOCK_MARGIN_S before that), and one accepted less than RECENT_ABORT_S ago, less the
        margin, has not been forgotten yet. A request without an arrival time (0) is checked."""
        accepted = request.arrival_time
        return (
            accepted > self.since + CLOCK_MARGIN_S
            and time.time() - accepted < RECENT_ABORT_S - CLOCK_MARGIN_S
        )

    def read(self) -> None:
        response = self.client.xread(self.last, count=256, block=READ_BLOCK_MS)
        for raw_stream, entries in response or []:
            self.last[as_str(raw_stream)] = as_str(entries[-1][0])
            messages, malformed = decode_entries(entries, protocol.decode_control)
            for entry_id, why in malformed.items():
                logger.error("malformed control entry %s ignored: %s", entry_id, why)
            for _, message in messages:
                self.inbox.put(message)


def _end_of(client: redis.Redis, stream: str) -> str:
    """The id of ``stream``'s last entry ("0-0" while it has none): read from there, every entry
    added from now on arrives. Not "$", which each XREAD resolves again: an entry added between
    two reads (while this thread handled the last reply, or waited for a core) was never read,
    and an idle engine whose one announcement was lost so waited with nothing to do while a
    peer worked through the requests it held."""
    last = client.xrevrange(stream, count=1)
    return as_str(last[0][0]) if last else "0-0"
