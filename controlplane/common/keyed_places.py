"""A bounded number of places per key, and a line for each key: what the API's per-tenant
queues share (controlplane/common/tenant_lanes.py at the door, inference/transport/
tenant_backlog.py in front of the engines).

A place that comes free goes straight to the first one in its key's line, so a newcomer
never overtakes someone waiting; a key with nobody in line and fewer places taken than its
limit lets a newcomer in at once. The line is in order of rank (lower first), then of arrival:
a request's ``priority`` orders its tenant's requests here as the engine's scheduler orders
them. Waiting costs the event loop nothing (a future each), and a waiter cancelled as its
place was handed to it passes the place on. Only the event loop's thread touches it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Hashable

Turn = tuple[float, int, asyncio.Future]  # (rank, arrival, the waiter's future)


class KeyedPlaces:
    def __init__(self) -> None:
        self._taken: dict[Hashable, int] = {}
        self._lines: dict[Hashable, list[Turn]] = {}  # heaps
        self._arrivals = itertools.count()

    def try_take(self, key: Hashable, limit: float) -> bool:
        """Take a place under ``key`` if nobody is in its line and fewer than ``limit`` are
        taken."""
        if key in self._lines or self._taken.get(key, 0) >= limit:
            return False
        self._taken[key] = self._taken.get(key, 0) + 1
        return True

    async def wait(self, key: Hashable, rank: float = 0) -> None:
        """Join ``key``'s line at ``rank`` and return with a place (after ``try_take`` found
        none)."""
        turn = (rank, next(self._arrivals), asyncio.get_running_loop().create_future())
        heapq.heappush(self._lines.setdefault(key, []), turn)
        try:
            await turn[2]
        except asyncio.CancelledError:
            if turn[2].done() and not turn[2].cancelled():  # handed a place just as it left
                self.release(key)
            else:
                self._leave_line(key, turn)
            raise

    def release(self, key: Hashable) -> None:
        """A place under ``key`` came free: to the first one in its line, else given back."""
        line = self._lines.get(key)
        while line:
            future = heapq.heappop(line)[2]
            if not future.done():
                future.set_result(None)  # the place changes hands: the count stays
                if not line:
                    del self._lines[key]
                return
        self._lines.pop(key, None)
        left = self._taken[key] - 1
        if left:
            self._taken[key] = left
        else:
            del self._taken[key]

    def taken(self, key: Hashable) -> int:
        return self._taken.get(key, 0)

    def in_line(self, key: Hashable) -> int:
        line = self._lines.get(key)
        return len(line) if line is not None else 0

    def _leave_line(self, key: Hashable, turn: Turn) -> None:
        line = self._lines.get(key)
        if line is not None and turn in line:
            line.remove(turn)
            heapq.heapify(line)
            if not line:
                del self._lines[key]
