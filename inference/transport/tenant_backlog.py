"""How many of one tenant's requests an API process lets wait for the engines at once; the rest
wait here, in order (of their ``priority``, then of arrival), and go as earlier ones start.

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

import logging
import math
from collections.abc import Callable, Hashable

from controlplane.common.keyed_places import KeyedPlaces
from engine import protocol

logger = logging.getLogger(__name__)

# Per live engine of the model: see the module docstring for why 64.
PER_ENGINE = 64


class TenantBacklog:
    """Places per key (model, tenant, class) for requests sent and not started, and the
    requests waiting for one."""

    def __init__(self, per_engine: int = PER_ENGINE):
        self.per_engine = per_engine  # 0: no bound
        self._places = KeyedPlaces()
        self._held_per_model: dict[str, int] = {}

    def held(self, model: str) -> int:
        """Requests for ``model`` waiting here now."""
        return self._held_per_model.get(model, 0)

    def sent(self, key: tuple[str, str, str]) -> int:
        """Requests of ``key`` sent and not started (or handed a place and about to be sent)."""
        return self._places.taken(key)

    async def enter(
        self,
        model: str,
        message: protocol.GenerateRequest,
        num_engines: int,
        *,
        on_wait: Callable[[], None],
    ) -> Place:
        """A place for ``message`` under its key (model, tenant, class): at once while fewer
        than the limit are sent and not started and nobody waits for one; else when one of
        those leaves, in order of its ``priority`` then of waiting (as the engine orders a
        tenant's requests), after calling ``on_wait`` (the engine client lets the request's
        tenant lane go: waiting here costs the process's event loop nothing, so the tenant's
        next requests may do their own work meanwhile)."""
        key = (model, message.tenant, message.service_class)
        limit = self.per_engine * max(1, num_engines) if self.per_engine > 0 else math.inf
        if self._places.try_take(key, limit):
            return Place(self._places, key)
        on_wait()
        if not self._places.in_line(key):  # once per burst, not once per request held
            logger.info(
                "tenant %s (%s) has %d requests waiting for the engines of %s: its next ones "
                "wait in this process until those start",
                message.tenant or "-",
                message.service_class,
                self.sent(key),
                model,
            )
        self._held_per_model[model] = self.held(model) + 1
        try:
            await self._places.wait(key, message.priority)
        finally:
            self._held_per_model[model] -= 1
        return Place(self._places, key)


class Place:
    """One request's place under its key; ``leave`` is idempotent."""

    __slots__ = ("_key", "_places")

    def __init__(self, places: KeyedPlaces, key: Hashable):
        self._places: KeyedPlaces | None = places
        self._key = key

    def leave(self) -> None:
        if self._places is not None:
            places, self._places = self._places, None
            places.release(self._key)
