"""A bounded number of places per key, and a line for each key: what the API's per-tenant
queues share (controlplane/common/tenant_lanes.py at the door, inference/transport/
tenant_backlog.py in front of the engines).

A place that comes free goes straight to the first one in its key's line, so a newcomer never
overtakes someone waiting; a key with nobody in line and fewer places taken than its limit lets
a newcomer in at once. The limit is the one the key's latest ``try_take`` gave: the tenant
backlog's shrinks as more API processes send to a model (and grows as they stop), so a place
that comes free is handed on only while fewer than it are taken, and a larger one lets that many
more in from the line at once. The line is in order of rank (lower first), then of arrival: a
request's ``priority`` orders its tenant's requests here as the engine's scheduler orders them.
Waiting costs the event loop nothing (a future each), and a waiter cancelled as its place was
handed to it passes the place on. Only the event loop's thread touches it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Hashable

Turn = tuple[float, int, asyncio.Future]  # (rank, arrival, the waiter's future)


class KeyedPlaces:
    def __init__(self) -> None:
        self._taken: dict[Hashable, int] = {}
        self._limits: dict[Hashable, float] = {}  # the latest try_take's, while any is taken
        self._lines: dict[Hashable, list[Turn]] = {}  # heaps
        self._arrivals = itertools.count()

    def try_take(self, key: Hashable, limit: float) -> bool:
        """Take a place under ``key`` if nobody is in its line and fewer than ``limit`` are
        taken (after handing places to those in line, when ``limit`` grew)."""
        self._limits[key] = limit
        self._fill(key)
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
        """A place under ``key`` came free: to the first one in its line while fewer than the
        limit are taken, else given back."""
        self._taken[key] -= 1
        self._fill(key)
        self._forget_idle(key)

    def _fill(self, key: Hashable) -> None:
        """Hand places to those first in ``key``'s line while fewer than its limit are taken."""
        line = self._lines.get(key)
        if line is None:
            return
        limit = self._limits.get(key, math.inf)
        while line and self._taken.get(key, 0) < limit:
            future = heapq.heappop(line)[2]
            if not future.done():  # a cancelled waiter left the heap lazily
                future.set_result(None)
                self._taken[key] = self._taken.get(key, 0) + 1
        if not line:
            del self._lines[key]

    def _forget_idle(self, key: Hashable) -> None:
        if not self._taken.get(key) and key not in self._lines:
            self._taken.pop(key, None)
            self._limits.pop(key, None)

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
