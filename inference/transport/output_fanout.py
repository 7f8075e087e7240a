"""The one reader of a frontend's output stream: every engine writes this process's deltas to
``Keys.outputs(frontend_id)``, and one task reads them and hands each to the queue of the
engine request it belongs to (the engine client's ``generate`` waits on that queue).

The blocking XREAD has a connection of its own, never one that commands wait for. What has
been read is trimmed from the stream, every TRIM_EVERY entries and whenever the reader has
caught up (a read that found nothing); deltas of a request nobody waits for any more (its
client left, or failover replaced it) are dropped.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from controlplane.common.redis_pools import async_client
from engine import protocol
from engine.protocol import FIELD, Keys
from engine.redis_outage import RETRY_AFTER_S, TRANSPORT_ERRORS, OutageLog

logger = logging.getLogger(__name__)

# How long the reader blocks in one XREAD.
READ_BLOCK_MS = 250
# Entries read between two trims of the stream; a reader that finds nothing more to read trims
# the rest. A trim after every read cost a round trip per read: with 32 conversations over four
# replicas (bench/prefix_routing.py, routed, 2-core Xeon) the reader's process used 1.17
# CPU-seconds a run against 0.96 trimming every 64, time to first token unchanged (10.5
# against 10.2 ms, six alternated runs each, 2026-11-28).
TRIM_EVERY = 64


class OutputFanOut:
    def __init__(self, redis_url: str, commands: aioredis.Redis, keys: Keys, frontend_id: str):
        self._redis = async_client(redis_url, max_connections=2)  # the blocking XREAD's own
        self._commands = commands  # for the trims
        self._key = keys.outputs(frontend_id)
        self._queues: dict[str, asyncio.Queue[protocol.RequestDelta]] = {}
        self._task: asyncio.Task | None = None
        self._closing = False

    def routed(self, request_id: str) -> bool:
        return request_id in self._queues

    def route(self, request_id: str, queue: asyncio.Queue) -> None:
        """Deliver the deltas of engine request ``request_id`` to ``queue`` from now on."""
        self._queues[request_id] = queue
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._read(), name=self._key)

    def unroute(self, request_id: str) -> None:
        """Stop delivering ``request_id``'s deltas (those still arriving are dropped)."""
        self._queues.pop(request_id, None)

    async def close(self) -> None:
        if self._task is not None:
            # redis-py lets a blocked XREAD outlive its cancellation; the reader checks this
            # flag between reads instead, so it ends within one READ_BLOCK_MS.
            self._closing = True
            await asyncio.wait({self._task}, timeout=READ_BLOCK_MS / 1000 + 1)
            if not self._task.done():
                self._task.cancel()
            self._task = None
        await self._redis.aclose()

    async def _read(self) -> None:
        last_id, untrimmed = b"0-0", 0
        outage = OutageLog(logger, f"reading {self._key}")  # Redis away: one line, not each try
        while not self._closing:
            try:
                response = await self._redis.xread(
                    {self._key: last_id}, count=512, block=READ_BLOCK_MS
                )
            except asyncio.CancelledError:
                raise
            except TRANSPORT_ERRORS as exc:
                outage.failed(exc)
                await asyncio.sleep(RETRY_AFTER_S)
                continue
            except Exception:
                logger.warning("reading %s failed; retrying", self._key, exc_info=True)
                await asyncio.sleep(0.5)
                continue
            outage.answered()
            for _stream, entries in response or []:
                for entry_id, fields in entries:
                    last_id = entry_id
                    self._dispatch(fields.get(FIELD))
                untrimmed += len(entries)
            if untrimmed >= TRIM_EVERY or (untrimmed and not response):
                await self._trim(last_id)
                untrimmed = 0

    async def _trim(self, last_id: bytes) -> None:
        try:
            await self._commands.xtrim(self._key, minid=protocol.next_stream_id(last_id))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.debug("trim of %s failed", self._key, exc_info=True)

    def _dispatch(self, data: bytes | None) -> None:
        if data is None:
            logger.warning("output entry without %r field ignored", FIELD)
            return
        try:
            batch = protocol.decode_outputs(data)
        except Exception:
            logger.warning("unreadable output entry ignored", exc_info=True)
            return
        for delta in batch.deltas:
            queue = self._queues.get(delta.request_id)
            if queue is not None:
                queue.put_nowait(delta)
