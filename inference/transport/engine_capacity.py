"""Backpressure before a request enters Redis: is an engine live, has it loaded the request's
LoRA adapter, and is too much waiting?

A refusal here is fast and clear (503 with Retry-After) instead of a request that sits in a
stream until its client gives up. Engine status records are read at most every
ADMISSION_CACHE_S per model, so a burst of requests costs one Redis round trip, not one each.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from controlplane.common.engine_statuses import aread_engine_statuses
from engine import protocol
from engine.protocol import EngineStatus, Keys
from inference.transport.cold_start import ColdStarts

# Live-engine snapshots used for admission are reused this long: 64 requests arriving at
# once cost one Redis round trip, not 64.
ADMISSION_CACHE_S = 0.25

# KEYS: a stream; ARGV: an entry id, the most worth counting. How many entries follow that id
# (counted in Redis: nothing but the number crosses the network).
COUNT_AFTER_SCRIPT = """
return #redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
"""


class EngineUnavailable(Exception):
    """No live engine serves this model (the API answers 503)."""


class AdapterLoading(EngineUnavailable):
    """The adapter is validated but no live engine has loaded it yet (503 with Retry-After)."""


class EngineOverloaded(Exception):
    """Too much work is waiting for this model; retry after ``retry_after`` seconds (503)."""

    def __init__(self, message: str, *, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class EngineCapacity:
    """Live engines per model and the work waiting for them, as seen from one API process."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        max_waiting: int,
        wake_timeout_s: float | None = None,
    ):
        self.redis = redis
        self.keys = keys
        self.max_waiting = max_waiting
        # Last use and load on demand (cold_start.py), when the process's client turns them on
        # (``wake_timeout_s`` 0: last use only, no request waits).
        self.cold_starts = (
            ColdStarts(redis, timeout_s=wake_timeout_s) if wake_timeout_s is not None else None
        )
        self._snapshots: dict[str, tuple[float, list[EngineStatus], int]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._count_after = redis.register_script(COUNT_AFTER_SCRIPT)

    async def live_engines(self, model: str | None = None) -> list[EngineStatus]:
        """Status records of every registered engine whose status key has not expired (read as
        every reader reads them: controlplane/common/engine_statuses.py)."""
        return await aread_engine_statuses(self.redis, self.keys, model=model)

    async def check(self, model: str, adapter: protocol.AdapterRef | None = None) -> None:
        """Raise EngineUnavailable or EngineOverloaded unless ``model`` can take a request now;
        AdapterLoading when no live engine of it has loaded ``adapter`` (this version)."""
        statuses, lag = await self._snapshot(model)
        if self.cold_starts is not None:
            await self.cold_starts.touch(model)
            if not statuses and self.cold_starts.timeout_s > 0:
                problem = await self.cold_starts.wait_for_engine(
                    model, lambda: self._serves(model, adapter)
                )
                if problem:
                    raise EngineUnavailable(problem)
                statuses, lag = await self._snapshot(model)
        if not statuses:
            raise EngineUnavailable(f"no engine is serving model {model!r} right now")
        if adapter is not None and not _held(statuses, adapter.name, adapter.checksum):
            raise AdapterLoading(
                f"adapter {adapter.name!r} is loading on the engines of {model!r}; "
                "retry in a few seconds"
            )
        waiting = lag + sum(s.num_waiting for s in statuses)
        if waiting >= self.max_waiting:
            # Time for the engines to start the excess, at their current request rate.
            capacity = max(1, sum(max(s.max_num_seqs, 1) for s in statuses))
            retry_after = min(60.0, max(1.0, (waiting - self.max_waiting + 1) / capacity))
            raise EngineOverloaded(
                f"{waiting} requests are waiting for model {model!r} "
                f"(limit {self.max_waiting}); retry later",
                retry_after=round(retry_after, 1),
            )

    async def routable(self, model: str) -> list[EngineStatus]:
        """The live, non-draining engines of ``model``, from the admission snapshot."""
        statuses, _lag = await self._snapshot(model)
        return statuses

    async def _serves(self, model: str, adapter: protocol.AdapterRef | None) -> bool:
        """A live engine of ``model`` (holding ``adapter``, if any): what a cold start waits
        for, so that the first request after it is not refused as AdapterLoading."""
        statuses, _lag = await self._snapshot(model)
        return bool(statuses) and (
            adapter is None or _held(statuses, adapter.name, adapter.checksum)
        )

    async def holds_adapter(self, model: str, name: str, checksum: str = "") -> bool:
        """Has a live engine of ``model`` loaded adapter ``name`` (this version)? From the
        same cached snapshot as admission."""
        statuses, _lag = await self._snapshot(model)
        return _held(statuses, name, checksum)

    async def _snapshot(self, model: str) -> tuple[list[EngineStatus], int]:
        """Live, non-draining engines of ``model`` and the stream's lag, at most
        ADMISSION_CACHE_S old."""
        cached = self._snapshots.get(model)
        if cached is None or time.monotonic() - cached[0] > ADMISSION_CACHE_S:
            # One refresh for a burst: the others wait for it instead of each asking Redis.
            lock = self._locks.setdefault(model, asyncio.Lock())
            async with lock:
                cached = self._snapshots.get(model)
                if cached is None or time.monotonic() - cached[0] > ADMISSION_CACHE_S:
                    statuses = [s for s in await self.live_engines(model) if not s.draining]
                    lag = await self._stream_lag(model) if statuses else 0
                    cached = (time.monotonic(), statuses, lag)
                    self._snapshots[model] = cached
        return cached[1], cached[2]

    async def _stream_lag(self, model: str) -> int:
        """Entries in the request stream no engine has read yet."""
        stream = self.keys.requests(model)
        try:
            groups = await self.redis.xinfo_groups(stream)
        except aioredis.ResponseError:  # no stream yet
            return 0
        for group in groups:
            name = group.get("name")
            if name in (protocol.ENGINE_GROUP, protocol.ENGINE_GROUP.encode()):
                lag = group.get("lag")
                if lag is not None:
                    return int(lag)
                # Redis 7.0 cannot tell the lag while the entry last delivered is deleted (an
                # engine deletes each entry once done: a backlog behind an engine with no room
                # reads so), and would count nothing: count what follows it, up to the limit.
                last = group.get("last-delivered-id")
                return await self._count_after(keys=[stream], args=[last, self.max_waiting])
        return 0


def _held(statuses: list[EngineStatus], name: str, checksum: str) -> bool:
    return any(s.holds_adapter(name, checksum) for s in statuses)
