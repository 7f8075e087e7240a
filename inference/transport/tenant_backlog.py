"""How many of one tenant's requests an API process lets wait for the engines at once; the rest
wait here, in order, and go as earlier ones start.

Why: under the fair policy an engine reads past its own queue (its look-ahead,
``--fair-lookahead``, 256 by default: docs/architecture.md, "Seeing past one tenant's
backlog"), so that another tenant's request behind a burst in the model's one stream reaches
the scheduler at once. A burst longer than the look-ahead still held that request in the
stream until the engines had read that far: 800 requests of 1,000 tokens from tenant A held
tenant B's short ones for up to 4.6 s, 526 times B's idle time to first token
(bench/tenant_flood_api.py --flood 800, 2026-11-28).

So each API process (each engine client: the Batch API's worker has its own) keeps, per model,
tenant and service class, at most ``per_engine`` requests times the model's live engines in
Redis and the engines' queues: sent, with no output yet. The next one waits here until one of
those starts (its first output), ends or fails. With up to four API processes that is within
the engines' look-ahead (64 x 4 per engine against 256 + the engine's own queue), so a request
of another tenant is never further back in the stream than the engines read.

It costs the tenant nothing while it is alone: its requests still reach every engine faster
than the engines start them (each engine reads at most its queue bound plus the look-ahead,
and a start frees a place here within a round trip). Requests that wait here count towards
``ENGINE_MAX_WAITING`` with those in the streams, so a flood is still refused with 503 past it,
not held in memory without bound. Failover's resubmissions of started requests do not pass
through here: they have started.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Hashable

logger = logging.getLogger(__name__)

# Per live engine of the model: see the module docstring for why 64.
PER_ENGINE = 64


class TenantBacklog:
    """Counts of requests sent and not started, per key (model, tenant, class), and the
    requests waiting for a place under their key's limit."""

    def __init__(self, per_engine: int = PER_ENGINE):
        self.per_engine = per_engine  # 0: no bound
        self._sent: dict[Hashable, int] = {}
        self._waiters: dict[Hashable, deque[asyncio.Future]] = {}
        self._held_per_model: dict[str, int] = {}

    def held(self, model: str) -> int:
        """Requests for ``model`` waiting here now."""
        return self._held_per_model.get(model, 0)

    def sent(self, key: tuple[str, str, str]) -> int:
        """Requests of ``key`` sent and not started (or handed a place and about to be sent)."""
        return self._sent.get(key, 0)

    async def enter(
        self, key: tuple[str, str, str], num_engines: int, *, on_wait: Callable[[], None]
    ) -> Place:
        """A place for one request under ``key`` (model, tenant, class): at once while fewer
        than the limit are sent and not started and nobody waits for one; else when one of
        those leaves, in order of waiting, after calling ``on_wait`` (the engine client lets
        the request's tenant lane go: waiting here costs the process's event loop nothing, so
        the tenant's next requests may do their own work meanwhile)."""
        limit = self.per_engine * max(1, num_engines)
        if self.per_engine <= 0 or (key not in self._waiters and self._sent.get(key, 0) < limit):
            self._sent[key] = self._sent.get(key, 0) + 1
            return Place(self, key)
        on_wait()
        waiter = asyncio.get_running_loop().create_future()
        if key not in self._waiters:  # once per burst, not once per request held
            logger.info(
                "tenant %s (%s) has %d requests waiting for the engines of %s: its next ones "
                "wait in this process until those start",
                key[1] or "-",
                key[2],
                self.sent(key),
                key[0],
            )
        self._waiters.setdefault(key, deque()).append(waiter)
        model = key[0]
        self._held_per_model[model] = self.held(model) + 1
        try:
            await waiter  # the place is handed over with the result: counted as sent already
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a place as it was cancelled
                self._leave(key)
            else:
                self._drop_waiter(key, waiter)
            raise
        finally:
            self._held_per_model[model] -= 1
        return Place(self, key)

    def _leave(self, key: Hashable) -> None:
        """One request of ``key`` started, ended or failed: its place goes to the next waiter."""
        waiters = self._waiters.get(key)
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the count stays: the place changes hands
                if not waiters:
                    del self._waiters[key]
                return
        self._waiters.pop(key, None)
        left = self._sent[key] - 1
        if left:
            self._sent[key] = left
        else:
            del self._sent[key]

    def _drop_waiter(self, key: Hashable, waiter: asyncio.Future) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            try:
                waiters.remove(waiter)
            except ValueError:
                pass
            if not waiters:
                del self._waiters[key]


class Place:
    """One request's place under its key; ``leave`` is idempotent."""

    __slots__ = ("_backlog", "_key")

    def __init__(self, backlog: TenantBacklog, key: Hashable):
        self._backlog: TenantBacklog | None = backlog
        self._key = key

    def leave(self) -> None:
        if self._backlog is not None:
            backlog, self._backlog = self._backlog, None
            backlog._leave(self._key)
