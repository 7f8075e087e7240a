"""How many of one tenant's requests an API process lets wait for the engines at once; the rest
wait here, in order (of their ``priority``, then of arrival), and go as earlier ones start.

Why: under the fair policy an engine reads past its own queue (its look-ahead,
``--fair-lookahead``, 256 by default: docs/architecture.md, "Seeing past one tenant's
backlog"), so that another tenant's request behind a burst in the model's one stream reaches
the scheduler at once. A burst longer than the look-ahead still held that request in the
stream until the engines had read that far: 800 requests of 1,000 tokens from tenant A held
tenant B's short ones for up to 4.6 s, 526 times B's idle time to first token
(bench/tenant_flood_api.py --flood 800, 2026-11-28).

So, in front of engines of the fair policy (FIFO ones get every request in arrival order, as
their operator chose), per model, tenant and service class, the frontends sending to the model
(the API processes, the Batch API's worker: each engine client) keep at most ``per_engine``
requests times the model's fair engines in Redis and the engines' queues, sent with no output
yet: each takes its share, ``per_engine`` divided by the frontends that sent to the model in the
last FRONTEND_WINDOW_S (counted in Redis on admission's round trip: engine_capacity.py), and at
least MIN_SHARE. The next one waits here until one of those starts (its first output), ends or
fails. 64 per engine is within the engines' look-ahead (256 + the engine's own queue) with room
for four tenants' bursts at once, so a request of another tenant is never further back in the
stream than the engines read. Past eight frontends the MIN_SHARE floor takes over, and the
engines read further ahead to match, with room for four tenants' bursts of MIN_SHARE per
frontend (engine/service/read_ahead.py). A frontend that starts sending is
counted by the others within a snapshot's life (at most a second): until then their share may
exceed the bound by one share, still within the look-ahead.

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

# Per live engine of the model, across the frontends: see the module docstring for why 64.
PER_ENGINE = 64
# Each frontend's share is at least this (per engine), however many frontends send: a burst
# through one of many still keeps the engines' queues fed while its earlier requests start.
MIN_SHARE = protocol.MIN_TENANT_SHARE


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

    def share(self, num_frontends: int) -> int:
        """This frontend's places per engine when ``num_frontends`` send to the model."""
        even = -(-self.per_engine // max(1, num_frontends))  # rounded up
        return min(self.per_engine, max(MIN_SHARE, even))

    def sent(self, key: tuple[str, str, str]) -> int:
        """Requests of ``key`` sent and not started (or handed a place and about to be sent)."""
        return self._places.taken(key)

    async def enter(
        self,
        model: str,
        message: protocol.GenerateRequest,
        fair_engines: int,
        num_frontends: int = 1,
        *,
        on_wait: Callable[[], None],
    ) -> Place:
        """A place for ``message`` under its key (model, tenant, class): at once while fewer
        than this frontend's limit (its share of the bound, with ``num_frontends`` sending to
        the model, times ``fair_engines``, the model's live engines that schedule by the fair
        policy: in front of FIFO engines nothing is held back, as the operator chose first
        come, first served) are sent and not started and nobody waits for one;
        else when one of
        those leaves, in order of its ``priority`` then of waiting (as the engine orders a
        tenant's requests), after calling ``on_wait`` (the engine client lets the request's
        tenant lane go: waiting here costs the process's event loop nothing, so the tenant's
        next requests may do their own work meanwhile)."""
        key = (model, message.tenant, message.service_class)
        bounded = self.per_engine > 0 and fair_engines > 0
        limit = self.share(num_frontends) * fair_engines if bounded else math.inf
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
