"""Taking over from dead pooling engines.

A pooling engine acknowledges a request only once its reply is written. One that dies between
reading a batch and replying (killed, out of memory, a native crash) leaves the batch pending
under its name in the consumer group, and its callers would wait out the API's silence timeout
for nothing. So every pooling engine checks every second for dead engines of its model
(engine/dead_engines.py: a status key missing for a grace). One survivor, under a short lock,
claims a dead engine's pending entries, embeds them as its own, and removes the dead engine
from the group and the registry. Under the fleet a crashed engine comes back under a new id,
and that restart is such a survivor.

An input that kills whichever engine embeds it would otherwise be claimed by every survivor in
turn, and take all of them down as their node agents restart them. An entry's deliveries count
the engines lost while holding it; from ``MAX_LOST_ENGINES`` on it gets an error reply instead
(with the other requests of its batches, which cannot be told apart from it; they can be
retried).
"""

from __future__ import annotations

import logging

import redis

from engine import protocol
from engine.dead_engines import DeadEngines, not_run_again
from engine.pooling import messages
from engine.redis_streams import as_str, decode_entries

logger = logging.getLogger(__name__)

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
        self.dead = DeadEngines(
            client,
            keys,
            model=model,
            me=engine_id,
            stream=stream,
            group=messages.POOLING_GROUP,
            grace_s=grace_s,
        )

    def check(self) -> list[Entry]:
        """The entries claimed from engines dead for ``grace_s`` (to embed now); those held
        by too many lost engines are answered with an error here instead."""
        claimed: list[Entry] = []
        for engine_id in self.dead.due():
            claimed += self.take_over(engine_id)
        return claimed

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
            error = not_run_again(lost[entry_id], self.model)
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
