"""Taking over from dead engines: an engine is dead when its status key has expired.

Requests a dead engine had started (they are in its ``started`` hash) end with an error event
to their frontend, since tokens were already delivered; requests it had claimed but not
started are claimed by a survivor and run there. One survivor does this per dead engine,
under a short lock.

"Expired" must mean dead, not "Redis was away": after an outage (or a restart that reloaded
already-expired keys) every status key may be missing for a moment while the live engines
publish theirs again. So an engine counts as dead only once its key has been missing for
``grace_s`` while this reaper had reached Redis for at least as long.

An engine restarted under the same ``--engine-id`` (a Kubernetes container restart) first
recovers its own earlier life (``recover_own``): what it had started fails with an error event,
what it had claimed and not started runs again. Nobody else would: its status key is alive.
"""

from __future__ import annotations

import logging
import time

import redis

from engine import protocol
from engine.protocol import ENGINE_GROUP, FIELD
from engine.redis_streams import as_str
from engine.service.redis_input import Channels, RequestReader

logger = logging.getLogger(__name__)

REAP_LOCK_S = 30
CLAIM_BATCH = 256


class DeadEngineReaper:
    def __init__(self, client: redis.Redis, channels: Channels, reader: RequestReader, *,
                 grace_s: float = 2.5):  # fmt: skip
        self.client, self.channels, self.keys = client, channels, channels.keys
        self.reader, self.grace_s = reader, grace_s
        self._missing_since: dict[str, float] = {}  # engine id -> monotonic time first seen
        self._reachable_since: float | None = None

    def candidates(self) -> set[str]:
        """Consumers of the group and registered engines of this model, except this one."""
        names: set[str] = set()
        try:
            consumers = self.client.xinfo_consumers(self.channels.requests, ENGINE_GROUP)
            names.update(as_str(consumer["name"]) for consumer in consumers)
        except redis.ResponseError:  # no stream or group yet
            pass
        for member in self.client.smembers(self.keys.engines()):
            model, engine_id = protocol.split_engine_member(as_str(member))
            if model == self.channels.model:
                names.add(engine_id)
        return names - {self.channels.engine_id}

    def check(self) -> None:
        """Take over from every engine of this model dead for ``grace_s``."""
        now = time.monotonic()
        try:
            if self._reachable_since is None:
                self._reachable_since = now
            names = self.candidates()
            self._missing_since = {k: t for k, t in self._missing_since.items() if k in names}
            for engine_id in sorted(names):
                if self.client.exists(self.keys.status(self.channels.model, engine_id)):
                    self._missing_since.pop(engine_id, None)
                    continue
                missing_since = self._missing_since.setdefault(engine_id, now)
                if min(now - missing_since, now - self._reachable_since) < self.grace_s:
                    continue  # maybe alive, its status not yet published again after an outage
                lock = self.keys.reaping(self.channels.model, engine_id)
                if self.client.set(lock, self.channels.engine_id, nx=True, ex=REAP_LOCK_S):
                    self.take_over(engine_id)
                    self._missing_since.pop(engine_id, None)
        except (redis.ConnectionError, redis.TimeoutError):
            if self._reachable_since is not None:
                logger.warning("Redis unreachable: no dead-engine checks until it is back")
            self._reachable_since = None

    def recover_own(self) -> None:
        """At start: take over from an earlier life of this engine id."""
        self.take_over(self.channels.engine_id)

    def withdraw_own(self) -> None:
        """At a clean exit: leave the group, unless entries are still pending under this
        engine (a survivor must claim them then)."""
        me, requests = self.channels.engine_id, self.channels.requests
        pending = self.client.xpending_range(
            requests, ENGINE_GROUP, min="-", max="+", count=1, consumername=me
        )
        if not pending:
            self.client.xgroup_delconsumer(requests, ENGINE_GROUP, me)
            self.client.delete(self.channels.started)

    def take_over(self, engine_id: str) -> None:
        """Fail what ``engine_id`` had started and run here what it had claimed but not
        started (its pending entries); a dead engine is also removed from the group."""
        model, me = self.channels.model, self.channels.engine_id
        restarted = engine_id == me
        why = (
            f"engine {me} restarted"
            if restarted
            else f"engine {engine_id} serving {model!r} stopped"
        )
        num_failed = self._fail_started(engine_id, why=why)
        num_claimed = self._claim_pending(engine_id)
        if not restarted:
            try:
                self.client.xgroup_delconsumer(self.channels.requests, ENGINE_GROUP, engine_id)
            except redis.ResponseError:
                pass
            self.client.srem(self.keys.engines(), protocol.engine_member(model, engine_id))
        if num_failed or num_claimed or not restarted:
            logger.warning("%s: %d started requests failed, %d unstarted ones taken over",
                           why, num_failed, num_claimed)  # fmt: skip

    def _fail_started(self, engine_id: str, *, why: str) -> int:
        """Error events for the requests in ``engine_id``'s started hash (tokens were already
        delivered: they cannot silently restart), their entries acknowledged."""
        started_key = self.keys.started(self.channels.model, engine_id)
        started = self.client.hgetall(started_key)
        failed: dict[str, list[protocol.RequestDelta]] = {}
        for entry_id, raw in started.items():
            try:
                record = protocol.decode_started(raw)
            except Exception:
                logger.error("unreadable started record %s of %s", entry_id, engine_id)
                continue
            failed.setdefault(record.frontend_id, []).append(
                protocol.RequestDelta(
                    request_id=record.request_id,
                    finish_reason="abort",
                    # Frontends that can resume the request elsewhere do (inference/transport/failover.py).
                    engine_lost=True,
                    error=f"{why} while running this request; retry it",
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
        return len(started)

    def _claim_pending(self, dead_id: str) -> int:
        """Claim ``dead_id``'s pending entries for this engine and run them. The scan moves
        past each batch: entries claimed from this engine's own id stay pending under it."""
        total = 0
        after = "-"
        while True:
            pending = self.client.xpending_range(
                self.channels.requests,
                ENGINE_GROUP,
                min=after,
                max="+",
                count=CLAIM_BATCH,
                consumername=dead_id,
            )
            if not pending:
                return total
            ids = [p["message_id"] for p in pending]
            after = f"({as_str(ids[-1])}"  # exclusive: the next batch starts after this one
            claimed = self.client.xclaim(
                self.channels.requests,
                ENGINE_GROUP,
                self.channels.engine_id,
                min_idle_time=0,
                message_ids=ids,
            )
            present = {as_str(entry_id) for entry_id, _ in claimed}
            gone = [i for i in ids if as_str(i) not in present]
            if gone:  # deleted from the stream meanwhile: nothing left to run
                self.client.xack(self.channels.requests, ENGINE_GROUP, *gone)
            self.reader.accept(claimed)
            total += len(claimed)
