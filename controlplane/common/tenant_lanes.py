"""Per-tenant lanes at the API's door: one tenant's burst cannot hold up another's requests in
this process.

An API process serves every request on one event loop. The work a request does before it
reaches the engine (Django's handler, authentication, validating the body, planning it,
submitting it) runs on that loop in small steps, and the loop takes ready steps first come,
first served. When tenant A sends 128 requests of 1,000 tokens at once, their steps fill the
loop for a second or more, and a request of tenant B that arrives among them waits behind every
one: each of its dozen steps queues behind a step of each of A's requests in flight (traced
2026-11-26: B's time to first token 300-600 ms under the flood, 16 ms idle, with the engine
itself ready for B within a few milliseconds).

So each request first enters its tenant's lane: at most ``width`` requests of one tenant do
their pre-engine work at once, and the others wait, in arrival order, on a future that costs
the loop nothing. A request leaves its lane as soon as it stops competing for the loop: when
its engine request is submitted (``leave_lane``, called by the engine client), when its response
starts, when it ends, or, whatever it is waiting for, after ``lease_s`` (a request held up by a
cold start or a slow database must not hold up its tenant's next ones). B's request then shares
the loop with at most ``width`` of A's, whatever the size of A's burst; A loses nothing, since
the loop runs one step at a time anyway and ``width`` requests in flight keep it busy while
some wait on Redis or the tokenizer threads.

Which lane a request takes is the caller's choice (``ApiASGIHandler``'s ``lane_of``; the
platform's is controlplane/access/lanes.py, by the tenant of the request's key): a lane is
only a queue, so a request put in the wrong one is at worst served in arrival order, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from contextvars import ContextVar

from controlplane.common.keyed_places import KeyedPlaces

_current: ContextVar[LaneSlot | None] = ContextVar("tenant_lane_slot", default=None)


def leave_lane() -> None:
    """The running request no longer needs its lane (its engine request is submitted)."""
    slot = _current.get()
    if slot is not None:
        slot.release()


class LaneSlot:
    """One request's place in its lane; ``release`` is idempotent."""

    __slots__ = ("_key", "_lanes", "_timer")

    def __init__(self, lanes: TenantLanes, key: Hashable, lease_s: float) -> None:
        self._lanes, self._key = lanes, key
        self._timer = asyncio.get_running_loop().call_later(lease_s, self.release)

    def release(self) -> None:
        if self._lanes is None:
            return
        lanes, self._lanes = self._lanes, None
        self._timer.cancel()
        lanes._hand_on(self._key)


class TenantLanes:
    """``width`` requests of a lane at a time; the rest wait in arrival order."""

    def __init__(self, *, width: int = 4, lease_s: float = 0.25) -> None:
        if width < 1:
            raise ValueError("a lane is at least 1 request wide")
        self.width, self.lease_s = width, lease_s
        self._places = KeyedPlaces()

    async def enter(self, key: Hashable) -> LaneSlot:
        if not self._places.try_take(key, self.width):
            await self._places.wait(key)
        slot = LaneSlot(self, key, self.lease_s)
        _current.set(slot)
        return slot

    def _hand_on(self, key: Hashable) -> None:
        """A place in ``key``'s lane came free: to the first one still waiting, or back."""
        self._places.release(key)

    def queued(self, key: Hashable) -> int:
        return self._places.in_line(key)


def lane_by_address(scope: dict) -> Hashable:
    """The lane of an HTTP request by its client's address alone."""
    client = scope.get("client") or ("", 0)
    return ("address", client[0])
