"""Epoch counters in Redis that tell every process's caches their data changed.

A per-process cache (API keys, the model catalog) tags what it loads with the epoch it read;
every write that changes the cached data bumps the epoch after its transaction commits, and
each process re-reads it at most every ``AUTH_EPOCH_CHECK_SECONDS`` (default 0.5 s). So a change
reaches every process within that interval, at the cost of two Redis GETs a second per process.

The platform keeps two: ``auth`` (what API keys may do; the key cache, controlplane/access/
keycache.py) and ``catalog`` (served models and adapters; controlplane/catalog/cache.py). The
services that change the data bump them here (``auth_epoch_bump``, ``catalog_epoch_bump``); the
caches, which live in higher layers, subscribe (``epoch_subscribe``) so this process drops its
own copy at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

from controlplane.common.redis_clients import async_redis, redis_key, sync_redis

logger = logging.getLogger(__name__)

AUTH_EPOCH = "auth"
CATALOG_EPOCH = "catalog"


def _check_interval() -> float:
    return float(getattr(settings, "AUTH_EPOCH_CHECK_SECONDS", 0.5))


class RedisEpoch:
    """This process's view of the epoch ``name``: the value last read, and when.

    ``refresh`` / ``arefresh`` re-read it once the check interval has passed and say whether
    it moved (then the caller drops what it cached). If Redis cannot be read the last value
    stays: callers keep serving cached data, bounded by their own max_age, rather than failing
    every request.
    """

    def __init__(self, name: str):
        self.name = name
        self.value = -1  # never read: whatever Redis holds counts as a change
        self._checked_at = float("-inf")

    def key(self) -> str:
        return redis_key(self.name, "epoch")

    def _due(self, now: float) -> bool:
        return now - self._checked_at >= _check_interval()

    def _observe(self, raw: bytes | None, now: float) -> bool:
        self._checked_at = now
        epoch = int(raw or 0)
        if epoch == self.value:
            return False
        logger.debug("%s epoch %d -> %d", self.name, self.value, epoch)
        self.value = epoch
        return True

    def _unreadable(self, exc: Exception, now: float) -> bool:
        logger.warning("cannot read the %s epoch (%s); relying on max_age", self.name, exc)
        self._checked_at = now
        return False

    def refresh(self, now: float) -> bool:
        """Re-read the epoch if the check is due; True when it changed since the last read."""
        if not self._due(now):
            return False
        try:
            raw = sync_redis().get(self.key())
        except Exception as exc:
            return self._unreadable(exc, now)
        return self._observe(raw, now)

    async def arefresh(self, now: float) -> bool:
        if not self._due(now):
            return False
        try:
            raw = await async_redis().get(self.key())
        except Exception as exc:
            return self._unreadable(exc, now)
        return self._observe(raw, now)

    def check_soon(self) -> None:
        """Re-read the epoch on the next refresh, whatever the interval."""
        self._checked_at = float("-inf")

    def bump(self, *, invalidate_local: Callable[[], None]) -> None:
        """Make every process drop its cached data: now, and again once the transaction commits.

        The bump after commit is the one that matters (a reload before it could still read the
        old rows); the immediate one covers callers outside a transaction and, through
        ``invalidate_local``, this process's own cache.
        """

        def bump() -> None:
            invalidate_local()
            try:
                sync_redis().incr(self.key())
            except Exception as exc:  # Redis down: cached data still expires after max_age
                logger.warning(
                    "could not bump the %s epoch (%s); relying on max_age", self.name, exc
                )

        bump()
        transaction.on_commit(bump)


# Per epoch name, what this process drops when it bumps the epoch itself.
_local_caches: dict[str, list[Callable[[], None]]] = {}


def epoch_subscribe(name: str, invalidate_local: Callable[[], None]) -> None:
    """Run ``invalidate_local`` whenever this process bumps the epoch ``name``."""
    _local_caches.setdefault(name, []).append(invalidate_local)


def epoch_bump(name: str) -> None:
    """Make every process drop what it cached under the epoch ``name``: this one at once (its
    subscribed caches), every one within the check interval once the transaction commits."""

    def invalidate_local() -> None:
        for invalidate in _local_caches.get(name, ()):
            invalidate()

    RedisEpoch(name).bump(invalidate_local=invalidate_local)


def auth_epoch_bump() -> None:
    """Make every API process reload its cached keys within a second (after commit)."""
    epoch_bump(AUTH_EPOCH)


def catalog_epoch_bump() -> None:
    """Make every API process reload the catalog within a second (after commit)."""
    epoch_bump(CATALOG_EPOCH)
