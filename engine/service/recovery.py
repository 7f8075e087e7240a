"""Taking over from dead engines (docs/protocol.md, Liveness and failure).

An engine is dead when its status key has expired (engine/dead_engines.py): one survivor,
under a short lock, ends the requests it had started (its ``started`` hash) with an error event
and runs those it had claimed but not started. An engine restarted under the same ``--engine-id``
takes over from its earlier life itself: its status key is alive, nobody else would.

A request that kills whichever engine runs it (a native crash, the kernel's OOM killer) would
otherwise be claimed and rerun by every survivor in turn, and take the whole fleet down with
it, again and again as the node agents restart the engines. A pending entry's deliveries say
how many engines were lost while holding it (each read or claim of it ended with its engine
gone), and an entry moved off a dead engine's direct stream carries that count along
(``protocol.LOST_FIELD``). Past ``MAX_LOST_ENGINES`` it is not run again: its client gets an
error, and so do the requests that shared those engines with it (a survivor cannot tell which
of them did it; they can be retried).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

from engine import protocol
from engine.dead_engines import DeadEngines, not_run_again
from engine.direct_routing import MOVE_SCRIPT, split_entries
from engine.protocol import ENGINE_GROUP, FIELD, LOST_FIELD
from engine.redis_streams import as_str, decode_entries

if TYPE_CHECKING:
    from engine.service.loop import EngineService

logger = logging.getLogger(__name__)

CLAIM_BATCH = 256
# Engines lost while holding a request before no engine runs it again: one loss can be
# another request's doing or the machine's, a second in a row is the request's pattern.
MAX_LOST_ENGINES = 2


class DeadEngineReaper:
    def __init__(self, client: redis.Redis, service: EngineService):
        self.client, self.keys = client, service.keys
        # Two missed status beats, and half a second for a slow one.
        self.grace_s = 2 * service.settings.status_interval + 0.5
        self.model, self.me = service.settings.model_name, service.settings.engine_id
        self.requests, self.accept = service.requests, service.reader.accept
        self.dead = DeadEngines(
            client,
            self.keys,
            model=self.model,
            me=self.me,
            stream=self.requests,
            group=ENGINE_GROUP,
            grace_s=self.grace_s,
        )
        self._move = client.register_script(MOVE_SCRIPT)

    def check(self) -> None:
        """Take over from every engine of this model (in the group or the registry) whose
        status key has been missing for ``grace_s``."""
        try:
            for engine_id in self.dead.due():
                self.take_over(engine_id)
        except (redis.ConnectionError, redis.TimeoutError):
            # Status keys missing across an outage prove nothing: the grace starts again.
            # (The heartbeat's failed status publish has logged the outage.)
            self.dead.forget()

    def withdraw_own(self) -> None:
        """At a clean exit: hand what was routed here and never read to the shared stream,
        and leave the group, unless entries are still pending under this engine (a survivor
        must claim them then, as from a dead engine)."""
        direct = self.keys.direct_requests(self.model, self.me)
        self.move_direct(self.me, undelivered_only=True)
        pending = any(
            self.client.xpending_range(
                stream, ENGINE_GROUP, min="-", max="+", count=1, consumername=self.me
            )
            for stream in (self.requests, direct)
            if self.client.exists(stream)
        )
        if not pending:
            self.client.xgroup_delconsumer(self.requests, ENGINE_GROUP, self.me)
            self.client.delete(self.keys.started(self.model, self.me), direct)

    def move_direct(self, engine_id: str, *, undelivered_only: bool = False) -> int:
        """Move ``engine_id``'s direct stream to the shared stream: every entry (a dead
        engine's, once its started requests are failed), or only those no read delivered yet
        (a draining engine's own)."""
        mode = "undelivered" if undelivered_only else "all"
        direct = self.keys.direct_requests(self.model, engine_id)
        return self._move(keys=[direct, self.requests], args=[mode, ENGINE_GROUP, LOST_FIELD])

    def take_over(self, engine_id: str) -> None:
        """Fail what ``engine_id`` had started and run here what it had claimed but not
        started (its pending entries); a dead engine is also removed from the group. At start,
        an engine takes over from its own earlier life."""
        restarted = engine_id == self.me
        why = f"engine {engine_id} " + (
            "restarted" if restarted else f"serving {self.model!r} stopped"
        )
        num_failed = self._fail_started(engine_id, why=why)
        num_claimed = self._claim_pending(engine_id)
        # What the API routed to it (claimed or not): back to the shared stream, for any engine.
        num_moved = self.move_direct(engine_id)
        if not restarted:  # (the group exists: _claim_pending has just read its pending entries)
            self.client.xgroup_delconsumer(self.requests, ENGINE_GROUP, engine_id)
            self.client.srem(self.keys.engines(), protocol.engine_member(self.model, engine_id))
            self.client.delete(self.keys.prefix_index(self.model, engine_id))
        if num_failed or num_claimed or num_moved or not restarted:
            message = (
                "%s: %d started requests failed, %d unstarted ones taken up again here, "
                "%d routed to it moved to the shared stream"
            )
            logger.warning(message, why, num_failed, num_claimed, num_moved)

    def _fail_started(self, engine_id: str, *, why: str) -> int:
        """Error events for the requests in ``engine_id``'s started hash (tokens were already
        delivered: they cannot silently restart), their entries acknowledged."""
        started_key = self.keys.started(self.model, engine_id)
        started = self.client.hgetall(started_key)
        failed: dict[str, list[protocol.RequestDelta]] = {}
        error = f"{why} while running this request; retry it"
        for raw in started.values():
            record = protocol.decode_started(raw)  # written only by an OutputWriter
            # engine_lost: a frontend may resume it elsewhere (inference/transport/failover.py).
            delta = protocol.RequestDelta(
                request_id=record.request_id, finish_reason="abort", engine_lost=True, error=error
            )
            failed.setdefault(record.frontend_id, []).append(delta)
        pipe = self.client.pipeline(transaction=True)
        for frontend_id, deltas in failed.items():
            batch = protocol.OutputBatch(engine_id=self.me, deltas=deltas)
            pipe.xadd(self.keys.outputs(frontend_id), {FIELD: protocol.encode(batch)})
        shared, direct = split_entries(started.keys())
        if shared:
            pipe.xack(self.requests, ENGINE_GROUP, *shared)
            pipe.xdel(self.requests, *shared)
        if direct:  # deleted, so that moving its direct stream cannot run them again
            direct_stream = self.keys.direct_requests(self.model, engine_id)
            pipe.xack(direct_stream, ENGINE_GROUP, *direct)
            pipe.xdel(direct_stream, *direct)
        pipe.delete(started_key)
        pipe.execute()
        return len(started)

    def _claim_pending(self, dead_id: str) -> int:
        """Claim ``dead_id``'s pending entries for this engine and run them. The scan moves
        past each batch: entries claimed from this engine's own id stay pending under it."""
        total, after = 0, "-"
        while True:
            pending = self.client.xpending_range(
                self.requests, ENGINE_GROUP, after, "+", CLAIM_BATCH, dead_id
            )
            if not pending:
                return total
            ids = [p["message_id"] for p in pending]
            after = f"({as_str(ids[-1])}"  # exclusive: the next batch starts after this one
            # Each delivery so far ended with its engine lost (this claim adds the next).
            lost = {as_str(p["message_id"]): p["times_delivered"] for p in pending}
            claimed = self.client.xclaim(
                self.requests, ENGINE_GROUP, self.me, min_idle_time=0, message_ids=ids
            )
            present = {as_str(entry_id) for entry_id, _ in claimed}
            gone = [i for i in ids if as_str(i) not in present]
            if gone:  # deleted from the stream meanwhile: nothing left to run
                self.client.xack(self.requests, ENGINE_GROUP, *gone)
            runnable, suspect = [], []
            for entry in claimed:
                entry_id, fields = as_str(entry[0]), entry[1] or {}
                lost[entry_id] += int(fields.get(LOST_FIELD, 0))
                (runnable if lost[entry_id] < MAX_LOST_ENGINES else suspect).append(entry)
            self._fail_lost(suspect, lost)
            self.accept(runnable)
            total += len(runnable)

    def _fail_lost(self, entries: list, lost: dict[str, int]) -> None:
        """End the requests of ``entries`` with an error, without running them (the module's
        docstring), and acknowledge them; a malformed one is left to ``accept``'s handling."""
        if not entries:
            return
        requests, malformed = decode_entries(entries, protocol.decode_request)
        if malformed:
            self.accept([e for e in entries if as_str(e[0]) in malformed])
        if not requests:
            return
        pipe = self.client.pipeline(transaction=True)
        for entry_id, request in requests:
            error = not_run_again(lost[entry_id], self.model, when=", before it produced a token")
            deltas = [
                protocol.RequestDelta(
                    request_id=request.request_id, index=i, finish_reason="abort", error=error
                )
                for i in range(max(1, request.sampling.n))
            ]
            batch = protocol.OutputBatch(engine_id=self.me, deltas=deltas)
            pipe.xadd(self.keys.outputs(request.frontend_id), {FIELD: protocol.encode(batch)})
        ids = [entry_id for entry_id, _ in requests]
        pipe.xack(self.requests, ENGINE_GROUP, *ids)
        pipe.xdel(self.requests, *ids)
        pipe.execute()
        logger.error(
            "not run again after %s lost engines each: %s",
            "/".join(sorted({str(lost[i]) for i in ids})),
            ", ".join(request.request_id for _, request in requests),
        )
