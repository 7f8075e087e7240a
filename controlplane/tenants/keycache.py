"""The per-process cache of API keys, invalidated everywhere through a Redis epoch.

The hot path must not query the database per request, yet a revocation must reach every API
process within seconds. Each process keeps ``prefix -> KeyRecord`` entries tagged with the
*auth epoch* they were loaded under; every write that changes what a key may do bumps the epoch
in Redis (after its transaction commits), and each process re-reads the epoch at most every
``AUTH_EPOCH_CHECK_SECONDS`` (default 1 s). An entry whose epoch is no longer current is
reloaded, so a revocation is visible everywhere within that interval plus one database read.
Unknown prefixes are cached too (as None) so random keys cannot hammer the database.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from controlplane.tenants.redis_clients import async_redis, redis_key, sync_redis
from controlplane.tenants.selectors import KeyRecord, key_record_load

logger = logging.getLogger(__name__)

_MISSING = object()


def _epoch_key() -> str:
    return redis_key("auth", "epoch")


def _check_interval() -> float:
    return float(getattr(settings, "AUTH_EPOCH_CHECK_SECONDS", 1.0))


class KeyCache:
    """LRU of key records, valid while their epoch is the current one and younger than max_age.

    ``max_age`` bounds staleness even if an epoch bump were lost (Redis restarted, say).
    """

    def __init__(self, *, max_entries: int = 10_000, max_age: float = 60.0):
        self.max_entries = max_entries
        self.max_age = max_age
        self._entries: OrderedDict[str, tuple[KeyRecord | None, int, float]] = OrderedDict()
        self._epoch = -1
        self._epoch_checked_at = float("-inf")

    # The epoch ---------------------------------------------------------------------------

    def _epoch_due(self, now: float) -> bool:
        return now - self._epoch_checked_at >= _check_interval()

    def _set_epoch(self, raw: bytes | None, now: float) -> None:
        epoch = int(raw or 0)
        if epoch != self._epoch:
            logger.debug("auth epoch %d -> %d: dropping %d keys", self._epoch, epoch, len(self))
            self._entries.clear()
            self._epoch = epoch
        self._epoch_checked_at = now

    def _epoch_unreadable(self, exc: Exception, now: float) -> None:
        # Redis is down: keep serving cached keys (max_age still bounds how stale they get;
        # reloads read revocations from the database) rather than failing every request.
        logger.warning("cannot read the auth epoch (%s); relying on max_age", exc)
        self._epoch_checked_at = now

    def invalidate_local(self) -> None:
        """Forget everything and re-read the epoch on the next lookup."""
        self._entries.clear()
        self._epoch_checked_at = float("-inf")

    # Entries -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def _cached(self, prefix: str, now: float):
        entry = self._entries.get(prefix)
        if entry is None:
            return _MISSING
        record, epoch, loaded_at = entry
        if epoch != self._epoch or now - loaded_at > self.max_age:
            del self._entries[prefix]
            return _MISSING
        self._entries.move_to_end(prefix)
        return record

    def _store(self, prefix: str, record: KeyRecord | None, epoch: int, now: float) -> None:
        self._entries[prefix] = (record, epoch, now)
        self._entries.move_to_end(prefix)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def aget(self, prefix: str) -> KeyRecord | None:
        now = time.monotonic()
        if self._epoch_due(now):
            try:
                self._set_epoch(await async_redis().get(_epoch_key()), now)
            except Exception as exc:
                self._epoch_unreadable(exc, now)
        record = self._cached(prefix, now)
        if record is _MISSING:
            epoch = self._epoch  # read before the load: a bump during it makes this entry stale
            record = await sync_to_async(key_record_load)(prefix=prefix)
            self._store(prefix, record, epoch, now)
        return record

    def get(self, prefix: str) -> KeyRecord | None:
        now = time.monotonic()
        if self._epoch_due(now):
            try:
                self._set_epoch(sync_redis().get(_epoch_key()), now)
            except Exception as exc:
                self._epoch_unreadable(exc, now)
        record = self._cached(prefix, now)
        if record is _MISSING:
            epoch = self._epoch
            record = key_record_load(prefix=prefix)
            self._store(prefix, record, epoch, now)
        return record


key_cache = KeyCache()


def auth_epoch_bump() -> None:
    """Make every API process reload its cached keys: now, and again once the transaction commits.

    The bump after commit is the one that matters (a reload before it could still read the old
    row); the immediate one covers callers outside a transaction and this process's own cache.
    """

    def bump() -> None:
        key_cache.invalidate_local()
        try:
            sync_redis().incr(_epoch_key())
        except Exception as exc:  # Redis down: cached keys still expire after max_age
            logger.warning("could not bump the auth epoch (%s); cached keys expire in 60 s", exc)

    bump()
    transaction.on_commit(bump)
