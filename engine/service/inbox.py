"""The queue from the Redis threads to the busy loop, and the events that travel on it."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from engine import protocol


@dataclass(slots=True)
class NewRequest:
    entry_id: str  # id in the model's request stream: XACK-ed when the request is done
    request: protocol.GenerateRequest


@dataclass(slots=True)
class AbortEvent:
    request_id: str


@dataclass(slots=True)
class ControlEvent:
    message: protocol.ControlMessage


@dataclass(slots=True)
class RegistrySnapshot:
    """The model's adapter registry hash as read at ``read_at`` (time.monotonic())."""

    refs: dict[str, protocol.AdapterRef]
    read_at: float


Event = NewRequest | AbortEvent | ControlEvent | RegistrySnapshot


class Inbox:
    """Thread-safe; counts the new requests in it, which backpressure needs."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.num_requests = 0

    def put(self, event: Event) -> None:
        if isinstance(event, NewRequest):
            with self._lock:
                self.num_requests += 1
        self._queue.put(event)

    def take_all(self, timeout: float = 0.0) -> list[Event]:
        """Everything queued now; waits up to ``timeout`` for the first event if empty."""
        events: list[Event] = []
        try:
            if timeout > 0:
                events.append(self._queue.get(timeout=timeout))
            while True:
                events.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        taken = sum(1 for e in events if isinstance(e, NewRequest))
        if taken:
            with self._lock:
                self.num_requests -= taken
        return events
