"""Taking over from dead pooling engines.

A pooling engine acknowledges a request only once its reply is written. One that dies between
reading a batch and replying (killed, out of memory, a native crash) leaves the batch pending
under its name in the consumer group, and its callers would wait out the API's silence timeout
for nothing. So every pooling engine checks, every few seconds, for engines of its model whose
status key has been missing for a grace (two missed status beats and a margin: a missing key
right after a Redis outage proves nothing, so the grace counts from the first check that reached
Redis). One survivor, under a short lock, claims a dead engine's pending entries, embeds them
as its own, and removes the dead engine from the group and the registry. Under the fleet a
crashed engine comes back under a new id, and that restart is such a survivor.

An input that kills whichever engine embeds it would otherwise be claimed by every survivor in
turn, and take all of them down as their node agents restart them. An entry's deliveries count
the engines lost while holding it; from ``MAX_LOST_ENGINES`` on it gets an error reply instead
(with the other requests of its batches, which cannot be told apart from it; they can be
retried).
"""

from __future__ import annotations

import logging
import time

import redis

from engine import protocol
from engine.pooling import messages
from engine.redis_streams import as_str, decode_entries

logger = logging.getLogger(__name__)

REAP_LOCK_S = 30
CLAIM_BATCH = 64
# As for generation engines (engine/service/recovery.py): one loss can be the machine's doing,
# a second in a row is the request's pattern.
MAX_LOST_ENGINES = 2

Entry = tuple[bytes, dict]


class DeadPoolerReaper:
    """Finds the dead pooling engines of one model and claims their pending requests."""

    def __init__(
        self,
        client: redis.Redis,
        keys: protocol.Keys,
        *,
        model: str,
        engine_id: str,
        stream: str,
        grace_s: float,
    ):
        self.client, self.keys = client, keys
        self.model, self.me, self.stream = model, engine_id, stream
        self.grace_s = grace_s
        self._missing_since: dict[str, float] = {}  # engine id -> time.monotonic()

    def check(self) -> list[Entry]:
        """The entries claimed from engines dead for ``grace_s`` (to embed now); those held
        by too many lost engines are answered with an error here instead."""
        now, names = time.monotonic(), set()
        try:
            consumers = self.client.xinfo_consumers(self.stream, messages.POOLING_GROUP)
            names.update(as_str(consumer["name"]) for consumer in consumers)
        except redis.ResponseError:  # no stream or group yet
            pass
        for member in self.client.smembers(self.keys.engines()):
            model, engine_id = protocol.split_engine_member(as_str(member))
            if model == self.model:
                names.add(engine_id)
        names.discard(self.me)
        missing = [
            e for e in sorted(names) if not self.client.exists(self.keys.status(self.model, e))
        ]
        self._missing_since = {e: self._missing_since.get(e, now) for e in missing}
        claimed: list[Entry] = []
        for engine_id in missing:
            lock = self.keys.reaping(self.model, engine_id)
            if now - self._missing_since[engine_id] >= self.grace_s and self.client.set(
                lock, self.me, nx=True, ex=REAP_LOCK_S
            ):
                claimed += self.take_over(engine_id)
                del self._missing_since[engine_id]
        return claimed

    def forget_missing(self) -> None:
        """Redis was away: status keys missing across it prove nothing, the grace restarts."""
        self._missing_since = {}

    def take_over(self, dead_id: str) -> list[Entry]:
        """Claim ``dead_id``'s pending entries for this engine, and remove it from the group
        and the registry."""
        runnable: list[Entry] = []
        suspect: list[Entry] = []
        lost: dict[str, int] = {}
        while True:
            try:
                pending = self.client.xpending_range(
                    self.stream, messages.POOLING_GROUP, "-", "+", CLAIM_BATCH, dead_id
                )
            except redis.ResponseError:  # the group went with a Redis that restarted empty
                pending = []
            if not pending:
                break
            ids = [p["message_id"] for p in pending]
            # Each delivery so far ended with its engine lost (this claim adds the next).
            lost.update({as_str(p["message_id"]): p["times_delivered"] for p in pending})
            claimed = self.client.xclaim(
                self.stream, messages.POOLING_GROUP, self.me, min_idle_time=0, message_ids=ids
            )
            present = {as_str(entry_id) for entry_id, _ in claimed}
            gone = [i for i in ids if as_str(i) not in present]
            if gone:  # deleted from the stream meanwhile: nothing left to embed
                self.client.xack(self.stream, messages.POOLING_GROUP, *gone)
            for entry in claimed:
                bucket = runnable if lost[as_str(entry[0])] < MAX_LOST_ENGINES else suspect
                bucket.append(entry)
        self._fail(suspect, lost)
        try:
            self.client.xgroup_delconsumer(self.stream, messages.POOLING_GROUP, dead_id)
        except redis.ResponseError:
            pass
        self.client.srem(self.keys.engines(), protocol.engine_member(self.model, dead_id))
        logger.log(
            logging.WARNING if runnable or suspect else logging.INFO,
            "pooling engine %s of %r is gone: %d of its requests taken up here, %d answered "
            "with an error",
            dead_id,
            self.model,
            len(runnable),
            len(suspect),
        )
        return runnable

    def _fail(self, entries: list[Entry], lost: dict[str, int]) -> None:
        """Answer ``entries`` with an error without embedding them (the module docstring)."""
        if not entries:
            return
        requests, _malformed = decode_entries(entries, messages.decode_request)
        pipe = self.client.pipeline(transaction=False)
        for entry_id, request in requests:
            error = (
                f"{lost[entry_id]} engines serving {self.model!r} stopped while they held this "
                "request; it is not run again, in case it is what stops them (see the engine "
                "logs). Retry it if it is not."
            )
            reply = messages.EmbedReply(request_id=request.request_id, error=error)
            pipe.rpush(request.reply_key, messages.encode(reply))
            pipe.expire(request.reply_key, messages.REPLY_TTL_S)
        ids = [entry[0] for entry in entries]  # malformed ones too: nothing could answer them
        pipe.xack(self.stream, messages.POOLING_GROUP, *ids)
        pipe.xdel(self.stream, *ids)
        pipe.execute()
        logger.error(
            "not embedded again after %d lost engines: %s",
            MAX_LOST_ENGINES,
            ", ".join(request.request_id for _, request in requests),
        )
