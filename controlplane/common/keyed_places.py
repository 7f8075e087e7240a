"""A bounded number of places per key, and a line for each key: what the API's per-tenant
queues share (controlplane/common/tenant_lanes.py at the door, inference/transport/
tenant_backlog.py in front of the engines).

A place that comes free goes straight to the first one in its key's line, so a newcomer
never overtakes someone waiting; a key with nobody in line and fewer places taken than its
limit lets a newcomer in at once. Waiting costs the event loop nothing (a future each), and a
waiter cancelled as its place was handed to it passes the place on. Only the event loop's
thread touches it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable


class KeyedPlaces:
    def __init__(self) -> None:
        self._taken: dict[Hashable, int] = {}
        self._lines: dict[Hashable, deque[asyncio.Future]] = {}

    def try_take(self, key: Hashable, limit: float) -> bool:
        """Take a place under ``key`` if nobody is in its line and fewer than ``limit`` are
        taken."""
        if key in self._lines or self._taken.get(key, 0) >= limit:
            return False
        self._taken[key] = self._taken.get(key, 0) + 1
        return True

    async def wait(self, key: Hashable) -> None:
        """Join ``key``'s line and return with a place (after ``try_take`` found none)."""
        turn = asyncio.get_running_loop().create_future()
        self._lines.setdefault(key, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed a place just as it left
                self.release(key)
            else:
                self._leave_line(key, turn)
            raise

    def release(self, key: Hashable) -> None:
        """A place under ``key`` came free: to the first one in its line, else given back."""
        line = self._lines.get(key)
        while line:
            turn = line.popleft()
            if not turn.done():
                turn.set_result(None)  # the place changes hands: the count stays
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

    def _leave_line(self, key: Hashable, turn: asyncio.Future) -> None:
        line = self._lines.get(key)
        if line is not None:
            try:
                line.remove(turn)
            except ValueError:
                pass
            if not line:
                del self._lines[key]
