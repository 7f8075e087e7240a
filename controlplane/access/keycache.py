"""The per-process cache of API keys, invalidated everywhere through a Redis epoch.

The hot path must not query the database per request, yet a revocation must reach every API
process within seconds. Each process keeps ``prefix -> KeyRecord`` entries tagged with the
*auth epoch* they were loaded under (redis_epoch.py); every write that changes what a key may
do bumps the epoch in Redis (after its transaction commits), and each process re-reads the
epoch at most every ``AUTH_EPOCH_CHECK_SECONDS`` (default 0.5 s). An entry whose epoch is no
longer current is reloaded, so a revocation is visible everywhere within that interval plus
one database read. Unknown prefixes are cached too (as None) so random keys cannot hammer the
database.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async

from controlplane.common.redis_epoch import AUTH_EPOCH, RedisEpoch, epoch_subscribe
from controlplane.tenants.selectors import KeyRecord, key_record_load

_MISSING = object()


class KeyCache:
    """LRU of key records, valid while their epoch is the current one and younger than max_age.

    ``max_age`` bounds staleness even if an epoch bump were lost (Redis restarted, say).
    """

    def __init__(self, *, max_entries: int = 10_000, max_age: float = 60.0):
        self.max_entries = max_entries
        self.max_age = max_age
        self.epoch = RedisEpoch(AUTH_EPOCH)
        self._entries: OrderedDict[str, tuple[KeyRecord | None, int, float]] = OrderedDict()
        self._loading: dict[tuple[str, int], asyncio.Future] = {}  # (prefix, epoch) being read

    def invalidate_local(self) -> None:
        """Forget everything and re-read the epoch on the next lookup."""
        self._entries.clear()
        self.epoch.check_soon()

    def __len__(self) -> int:
        return len(self._entries)

    def _cached(self, prefix: str, now: float):
        entry = self._entries.get(prefix)
        if entry is None:
            return _MISSING
        record, epoch, loaded_at = entry
        if epoch != self.epoch.value or now - loaded_at > self.max_age:
            del self._entries[prefix]
            return _MISSING
        self._entries.move_to_end(prefix)
        return record

    def _store(self, prefix: str, record: KeyRecord | None, epoch: int, now: float) -> None:
        self._entries[prefix] = (record, epoch, now)
        self._entries.move_to_end(prefix)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def aget(
        self, prefix: str, *, before_load: Callable[[], Awaitable[None]] | None = None
    ) -> KeyRecord | None:
        """The record of ``prefix``; ``before_load`` is awaited (and may raise) only when the
        record must come from the database, the throttle's chance to refuse first."""
        now = time.monotonic()
        if await self.epoch.arefresh(now):
            self._entries.clear()
        record = self._cached(prefix, now)
        if record is not _MISSING:
            return record
        # One load per prefix and epoch: a burst of requests with one key whose entry just
        # lapsed (every 60 s, or after any key change bumps the epoch) waits for a single
        # database read instead of starting one each (128 requests: 128 threads and connections).
        # The epoch is read before the load: a bump during it makes the entry stale.
        key = (prefix, self.epoch.value)
        if key not in self._loading and before_load is not None:
            await before_load()
        if key not in self._loading:  # (nor started while the throttle answered)
            # The load runs on this request's thread (controlplane/common/api_middleware.py
            # lends it for the request only). Its first step hands the read to that thread, and
            # runs before this request can be cancelled out of the await below, so the read
            # never starts after the request has given its thread back.
            loading = asyncio.ensure_future(self._load(*key, now))
            self._loading[key] = loading
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        # Shielded: one caller going away (its client disconnected) must not cancel the read
        # the others wait for.
        return await asyncio.shield(self._loading[key])

    async def _load(self, prefix: str, epoch: int, now: float) -> KeyRecord | None:
        record = await sync_to_async(key_record_load)(prefix=prefix)
        self._store(prefix, record, epoch, now)
        return record

    def peek(self, prefix: str) -> KeyRecord | None:
        """The record held for ``prefix`` now, if any: no epoch check, no database read (for
        sorting requests before they authenticate, never for letting one in)."""
        entry = self._entries.get(prefix)
        return entry[0] if entry is not None else None

    def get(self, prefix: str) -> KeyRecord | None:
        now = time.monotonic()
        if self.epoch.refresh(now):
            self._entries.clear()
        record = self._cached(prefix, now)
        if record is _MISSING:
            epoch = self.epoch.value
            record = key_record_load(prefix=prefix)
            self._store(prefix, record, epoch, now)
        return record


key_cache = KeyCache()
# A write in this process (auth_epoch_bump) empties this process's cache at once.
epoch_subscribe(AUTH_EPOCH, key_cache.invalidate_local)
