"""Backpressure before a request enters Redis: is an engine live, has it loaded the request's
LoRA adapter, and is too much waiting?

A refusal here is fast and clear (503 with Retry-After) instead of a request that sits in a
stream until its client gives up. Engine status records are read at most every
ADMISSION_CACHE_S per model, so a burst of requests costs one Redis round trip, not one each;
and that read is one round trip (the engines set, their records and the stream's lag in one
pipeline) while the model's registered engines stay those of the read before.

A base-model request that finds the snapshot older than that, but at most ADMISSION_STALE_S,
is admitted on it while a read runs in the background: requests a fraction of a second apart
(an agent's calls in turn, a chat on a quiet platform) would otherwise each add that round
trip, to a Redis woken from idle, to their time to first token. A stale snapshot may admit,
never refuse: whatever it would refuse (no engine, too much waiting) is decided again on a
fresh read, so an engine that came up meanwhile is never turned away. Requests for a LoRA
adapter always use a fresh one: an engine that unloaded the adapter meanwhile would fail the
request instead of the API's 503 to retry.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from controlplane.common.engine_statuses import (
    aread_engine_statuses,
    decode_statuses,
    registered_status_keys,
)
from engine import protocol
from engine.protocol import EngineStatus, Keys
from inference.transport.cold_start import ColdStarts

logger = logging.getLogger(__name__)

# Live-engine snapshots used for admission are reused this long: 64 requests arriving at
# once cost one Redis round trip, not 64.
ADMISSION_CACHE_S = 0.25
# Up to this age a snapshot still admits a base-model request, while a fresh one is read in
# the background (module docstring): one status interval (ServiceSettings.status_interval),
# how old an engine's own record may already be when it is read.
ADMISSION_STALE_S = 1.0

# How long a frontend counts as sending to a model: those share a tenant's room in the engines'
# queues (tenant_backlog.py), and the engines read further ahead as they grow in number.
FRONTEND_WINDOW_S = protocol.FRONTEND_WINDOW_S

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
        frontend_id: str | None = None,
    ):
        self.redis = redis
        self.frontend_id = frontend_id  # None: this client is not counted among the senders
        self.keys = keys
        self.max_waiting = max_waiting
        # Last use and load on demand (cold_start.py), when the process's client turns them on
        # (``wake_timeout_s`` 0: last use only, no request waits).
        self.cold_starts = (
            ColdStarts(redis, timeout_s=wake_timeout_s) if wake_timeout_s is not None else None
        )
        self._snapshots: dict[str, tuple[float, list[EngineStatus], int]] = {}
        # Per model, the status keys of its registered engines at the last read.
        self._status_keys: dict[str, list[str]] = {}
        # Per model, the frontends sending to it at the last read (this one included).
        self._frontends: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._background_reads: dict[str, asyncio.Task] = {}
        self._count_after = redis.register_script(COUNT_AFTER_SCRIPT)

    async def live_engines(self, model: str | None = None) -> list[EngineStatus]:
        """Status records of every registered engine whose status key has not expired (read as
        every reader reads them: controlplane/common/engine_statuses.py)."""
        return await aread_engine_statuses(self.redis, self.keys, model=model)

    async def check(
        self, model: str, adapter: protocol.AdapterRef | None = None, *, held_here: int = 0
    ) -> None:
        """Raise EngineUnavailable or EngineOverloaded unless ``model`` can take a request now;
        AdapterLoading when no live engine of it has loaded ``adapter`` (this version).
        ``held_here``: this process's requests for ``model`` not sent yet, waiting for their
        tenant's turn (tenant_backlog.py): they count as waiting too."""
        statuses, lag, stale = await self._snapshot(model, stale_ok=adapter is None)
        lag += held_here
        if stale and self._refusal(model, adapter, statuses, lag) is not None:
            statuses, lag, _ = await self._snapshot(model)  # refused only on a fresh read
        if await self._touch_and_wake(model, adapter, statuses):
            statuses, lag, _ = await self._snapshot(model)
        refusal = self._refusal(model, adapter, statuses, lag)
        if refusal is not None:
            raise refusal

    async def check_served(self, model: str) -> None:
        """Raise EngineUnavailable unless a live engine serves ``model`` now (after a cold
        start, if its deployment scales to zero): the check for a model whose engines keep no
        queue to count, an embeddings model's pooling engines."""
        statuses, _lag, _stale = await self._snapshot(model)
        if await self._touch_and_wake(model, None, statuses):
            statuses, _lag, _stale = await self._snapshot(model)
        if not statuses:
            raise EngineUnavailable(f"no engine is serving model {model!r} right now")

    async def _touch_and_wake(
        self, model: str, adapter: protocol.AdapterRef | None, statuses: list[EngineStatus]
    ) -> bool:
        """Record a use of ``model`` (the idle clock scale-to-zero unloads by) and, when no
        engine of it is live, wake its deployment and wait for an engine (cold_start.py);
        raises EngineUnavailable when none comes. True when it waited: read again."""
        if self.cold_starts is None:
            return False
        await self.cold_starts.touch(model)
        if statuses or self.cold_starts.timeout_s <= 0:
            return False
        problem = await self.cold_starts.wait_for_engine(
            model, lambda: self._serves(model, adapter)
        )
        if problem:
            raise EngineUnavailable(problem)
        return True

    def _refusal(
        self,
        model: str,
        adapter: protocol.AdapterRef | None,
        statuses: list[EngineStatus],
        lag: int,
    ) -> Exception | None:
        """Why a request for ``model`` (and ``adapter``) cannot be taken on this snapshot, as
        the exception ``check`` raises; None when it can."""
        if not statuses:
            return EngineUnavailable(f"no engine is serving model {model!r} right now")
        if adapter is not None and not _held(statuses, adapter.name, adapter.checksum):
            return AdapterLoading(
                f"adapter {adapter.name!r} is loading on the engines of {model!r}; "
                "retry in a few seconds"
            )
        waiting = lag + sum(s.num_waiting for s in statuses)
        if waiting >= self.max_waiting:
            # Time for the engines to start the excess, at their current request rate.
            capacity = max(1, sum(max(s.max_num_seqs, 1) for s in statuses))
            retry_after = min(60.0, max(1.0, (waiting - self.max_waiting + 1) / capacity))
            return EngineOverloaded(
                f"{waiting} requests are waiting for model {model!r} "
                f"(limit {self.max_waiting}); retry later",
                retry_after=round(retry_after, 1),
            )
        return None

    def frontends(self, model: str) -> int:
        """How many frontends were sending requests to ``model`` at the last read, this one
        included (at least 1)."""
        return max(1, self._frontends.get(model, 1))

    async def routable(self, model: str) -> list[EngineStatus]:
        """The live, non-draining engines of ``model``, from the admission snapshot (a stale
        one included: a route to an engine that went away meanwhile falls back to the shared
        stream in Redis, engine/direct_routing.py)."""
        statuses, _lag, _stale = await self._snapshot(model, stale_ok=True)
        return statuses

    async def _serves(self, model: str, adapter: protocol.AdapterRef | None) -> bool:
        """A live engine of ``model`` (holding ``adapter``, if any): what a cold start waits
        for, so that the first request after it is not refused as AdapterLoading."""
        statuses, _lag, _stale = await self._snapshot(model)
        return bool(statuses) and (
            adapter is None or _held(statuses, adapter.name, adapter.checksum)
        )

    async def holds_adapter(self, model: str, name: str, checksum: str = "") -> bool:
        """Has a live engine of ``model`` loaded adapter ``name`` (this version)? From the
        same cached snapshot as admission."""
        statuses, _lag, _stale = await self._snapshot(model)
        return _held(statuses, name, checksum)

    async def _snapshot(
        self, model: str, *, stale_ok: bool = False
    ) -> tuple[list[EngineStatus], int, bool]:
        """Live, non-draining engines of ``model``, the stream's lag, and whether they are
        stale: at most ADMISSION_CACHE_S old, or with ``stale_ok`` at most ADMISSION_STALE_S
        old while a fresh read runs in the background."""
        cached = self._snapshots.get(model)
        if cached is not None and stale_ok:
            age = time.monotonic() - cached[0]
            if ADMISSION_CACHE_S < age <= ADMISSION_STALE_S:
                self._read_in_background(model)
                return cached[1], cached[2], True
        return (*await self._fresh(model), False)

    def _read_in_background(self, model: str) -> None:
        if model not in self._background_reads:
            task = asyncio.get_running_loop().create_task(self._read_quietly(model))
            self._background_reads[model] = task
            task.add_done_callback(lambda _: self._background_reads.pop(model, None))

    async def _read_quietly(self, model: str) -> None:
        try:
            await self._fresh(model)
        except Exception:  # the next request reads it again, on its own path if it must
            logger.debug("background read of %s's engines failed", model, exc_info=True)

    async def aclose(self) -> None:
        """Let the background reads in flight end (before the client's connections close)."""
        if self._background_reads:
            await asyncio.wait(list(self._background_reads.values()), timeout=5)

    async def _fresh(self, model: str) -> tuple[list[EngineStatus], int]:
        """The snapshot of ``model``, read now unless at most ADMISSION_CACHE_S old."""
        cached = self._snapshots.get(model)
        if cached is None or time.monotonic() - cached[0] > ADMISSION_CACHE_S:
            # One refresh for a burst: the others wait for it instead of each asking Redis.
            lock = self._locks.setdefault(model, asyncio.Lock())
            async with lock:
                cached = self._snapshots.get(model)
                if cached is None or time.monotonic() - cached[0] > ADMISSION_CACHE_S:
                    statuses, lag = await self._read(model)
                    cached = (time.monotonic(), statuses, lag)
                    self._snapshots[model] = cached
        return cached[1], cached[2]

    async def _read(self, model: str) -> tuple[list[EngineStatus], int]:
        """Live, non-draining engines of ``model`` and the stream's lag. One round trip reads
        the engines set, the records of the engines registered at the last read and the
        stream's consumer groups; a second reads the records only when the set has changed
        (an engine registered or withdrew). Three sequential round trips cost an idle API
        process 1.6 ms of a request's time to first token. The same round trip marks this
        frontend as sending to ``model`` and counts those that are."""
        known = self._status_keys.get(model, [])
        stream = self.keys.requests(model)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smembers(self.keys.engines())
            pipe.xinfo_groups(stream)
            if self.frontend_id is not None:
                self._count_frontends(pipe, model)
            if known:
                pipe.mget(known)
            # Not raised: XINFO answers an error while the stream does not exist yet.
            replies = await pipe.execute(raise_on_error=False)
        members, groups, records = replies[0], replies[1], replies[-1] if known else []
        if isinstance(members, Exception):
            raise members
        if self.frontend_id is not None and isinstance(replies[5], int):
            self._frontends[model] = replies[5]
        status_keys = registered_status_keys(members, self.keys, model)
        if status_keys != known:
            records = await self.redis.mget(status_keys) if status_keys else []
            self._status_keys[model] = status_keys
        if isinstance(records, Exception):
            raise records
        statuses = [s for s in decode_statuses(records) if not s.draining]
        if not statuses or isinstance(groups, Exception):  # no stream yet: nothing waits
            return statuses, 0
        return statuses, await self._stream_lag(stream, groups)

    def _count_frontends(self, pipe, model: str) -> None:
        """Four commands (replies 2 to 5 of ``_read``'s pipeline; the count last): this
        frontend's mark, the marks older than FRONTEND_WINDOW_S dropped, the count, and a TTL
        so that a model nobody sends to any more leaves no key behind."""
        key, now = self.keys.frontends(model), time.time()
        pipe.zadd(key, {self.frontend_id: now})
        pipe.zremrangebyscore(key, "-inf", now - FRONTEND_WINDOW_S)
        pipe.expire(key, int(10 * FRONTEND_WINDOW_S))
        pipe.zcard(key)

    async def _stream_lag(self, stream: str, groups: list[dict]) -> int:
        """Entries in the request stream no engine has read yet, from its consumer groups."""
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
