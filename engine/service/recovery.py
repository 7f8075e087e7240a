"""Taking over from dead engines: an engine is dead when its status key has expired.

Requests a dead engine had started (they are in its ``started`` hash) end with an error event
to their frontend, since tokens were already delivered; requests it had claimed but not
started are claimed by a survivor and run there. One survivor does this per dead engine,
under a short lock.
"""

from __future__ import annotations

import logging

import redis

from engine import protocol
from engine.protocol import ENGINE_GROUP, FIELD
from engine.service.redis_io import Channels, RequestReader

logger = logging.getLogger(__name__)

REAP_LOCK_S = 30
CLAIM_BATCH = 256


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class DeadEngineReaper:
    def __init__(self, client: redis.Redis, channels: Channels, reader: RequestReader):
        self.client = client
        self.channels = channels
        self.keys = channels.keys
        self.reader = reader

    def candidates(self) -> set[str]:
        """Consumers of the group and registered engines of this model, except this one."""
        names: set[str] = set()
        try:
            for consumer in self.client.xinfo_consumers(self.channels.requests, ENGINE_GROUP):
                names.add(_text(consumer["name"]))
        except redis.ResponseError:  # no stream or group yet
            pass
        for member in self.client.smembers(self.keys.engines()):
            model, engine_id = protocol.split_engine_member(_text(member))
            if model == self.channels.model:
                names.add(engine_id)
        names.discard(self.channels.engine_id)
        return names

    def check(self) -> list[str]:
        """Reap every dead engine of this model; returns the ids reaped."""
        reaped = []
        for engine_id in sorted(self.candidates()):
            if self.client.exists(self.keys.status(self.channels.model, engine_id)):
                continue
            lock = self.keys.reaping(self.channels.model, engine_id)
            if not self.client.set(lock, self.channels.engine_id, nx=True, ex=REAP_LOCK_S):
                continue
            self.reap(engine_id)
            reaped.append(engine_id)
        return reaped

    def reap(self, dead_id: str) -> None:
        model = self.channels.model
        started_key = self.keys.started(model, dead_id)
        started = self.client.hgetall(started_key)
        failed: dict[str, list[protocol.RequestDelta]] = {}
        for entry_id, raw in started.items():
            try:
                record = protocol.decode_started(raw)
            except Exception:
                logger.error("unreadable started record %s of %s", entry_id, dead_id)
                continue
            failed.setdefault(record.frontend_id, []).append(
                protocol.RequestDelta(
                    request_id=record.request_id,
                    finish_reason="abort",
                    error=f"engine {dead_id} serving {model!r} stopped while running this "
                    "request; retry it",
                )
            )
        pipe = self.client.pipeline(transaction=True)
        for frontend_id, deltas in failed.items():
            batch = protocol.OutputBatch(engine_id=self.channels.engine_id, deltas=deltas)
            pipe.xadd(self.keys.outputs(frontend_id), {FIELD: protocol.encode(batch)})
        if started:
            pipe.xack(self.channels.requests, ENGINE_GROUP, *started.keys())
        pipe.delete(started_key)
        pipe.execute()
        num_claimed = self._claim_pending(dead_id)
        try:
            self.client.xgroup_delconsumer(self.channels.requests, ENGINE_GROUP, dead_id)
        except redis.ResponseError:
            pass
        self.client.srem(self.keys.engines(), protocol.engine_member(model, dead_id))
        logger.warning(
            "engine %s is dead: %d started requests failed, %d unstarted ones taken over",
            dead_id,
            len(started),
            num_claimed,
        )

    def _claim_pending(self, dead_id: str) -> int:
        total = 0
        while True:
            pending = self.client.xpending_range(
                self.channels.requests,
                ENGINE_GROUP,
                min="-",
                max="+",
                count=CLAIM_BATCH,
                consumername=dead_id,
            )
            if not pending:
                return total
            ids = [p["message_id"] for p in pending]
            claimed = self.client.xclaim(
                self.channels.requests,
                ENGINE_GROUP,
                self.channels.engine_id,
                min_idle_time=0,
                message_ids=ids,
            )
            present = {_text(entry_id) for entry_id, _ in claimed}
            gone = [i for i in ids if _text(i) not in present]
            if gone:  # deleted from the stream meanwhile: nothing left to run
                self.client.xack(self.channels.requests, ENGINE_GROUP, *gone)
            self.reader.accept([(entry_id, fields) for entry_id, fields in claimed])
            total += len(claimed)
