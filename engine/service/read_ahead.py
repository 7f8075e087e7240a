"""How many requests an engine keeps read from its streams and not yet scheduled: the reader's
backpressure bound (EngineService.room).

Without ``--max-queued`` the bound is a quarter of the batch, at least 16. Under the fair policy
the engine reads further, its look-ahead, so that another tenant's request behind one tenant's
burst in the model's stream reaches the scheduler at once (docs/architecture.md, "Seeing past one
tenant's backlog"). The API processes keep each tenant's unstarted requests within a bound per
engine that they share (inference/transport/tenant_backlog.py): 64 per engine while up to eight
of them send to the model, and 8 per engine from each past eight (each keeps a share of at
least ``protocol.MIN_TENANT_SHARE``, so that a burst through one of many still keeps the engines
fed). A tenant's burst is thus up to ``MIN_TENANT_SHARE`` times the number of frontends deep per
engine, and the look-ahead grows with that number: it leaves room for ``BURSTS`` tenants' bursts
at once, and never falls below ``--fair-lookahead`` (256, four bursts of 64). The engine reads
the number from ``Keys.frontends`` on its heartbeat; the frontends mark themselves there and drop
stale marks on every admission read, so the set's size is the number sending now.

A larger look-ahead changes nothing in how requests are held: whatever the engine reads is
claimed through the consumer group like any other request (pending under this engine, recovered
if it dies). What it costs: unstarted requests another replica could have taken (one that
runs dry is handed some: hand_over.py).
"""

from __future__ import annotations

import logging

import redis

from engine import protocol
from engine.config import EngineConfig, ServiceSettings

logger = logging.getLogger(__name__)

# Tenants whose whole bursts the look-ahead holds at once: the default --fair-lookahead (256)
# is four of the API's bound of 64 per engine.
BURSTS = 4


def base_bound(config: EngineConfig) -> int:
    """The bound without look-ahead: a quarter of the batch, at least 16."""
    return max(16, config.max_num_seqs // 4)


class ReadAhead:
    """The reader's bound (``bound``, read by the reader thread) and, under the fair policy with
    no ``--max-queued``, its refresh from the number of frontends (``refresh``, the heartbeat's).
    """

    def __init__(self, config: EngineConfig, settings: ServiceSettings, keys: protocol.Keys):
        self.grows = config.scheduling_policy == "fair" and settings.max_queued is None
        self._key = keys.frontends(settings.model_name)
        self._base = base_bound(config)
        self._floor = settings.fair_lookahead
        self.frontends = 0  # sending to the model at the last refresh
        if settings.max_queued is not None:
            self.bound = settings.max_queued
        else:
            self.bound = self._base + (self._floor if self.grows else 0)

    def lookahead(self, frontends: int) -> int:
        """The look-ahead with ``frontends`` frontends sending to the model."""
        return max(self._floor, BURSTS * protocol.MIN_TENANT_SHARE * frontends)

    def refresh(self, client: redis.Redis) -> None:
        """Read how many frontends send to the model and set the bound to match; a Redis error
        keeps the bound (the next heartbeat retries)."""
        if not self.grows:
            return
        try:
            frontends = int(client.zcard(self._key))
        except redis.RedisError as exc:
            logger.warning("reading the frontends sending to this model failed: %s", exc)
            return
        bound = self._base + self.lookahead(frontends)
        if bound != self.bound:
            logger.info(
                "%d frontends send to this model: reading up to %d requests ahead (was %d)",
                frontends,
                bound,
                self.bound,
            )
        self.frontends, self.bound = frontends, bound  # one int each: the reader sees either
