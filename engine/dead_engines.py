"""Which engines of a model are dead, as every engine of it checks (generation engines:
engine/service/recovery.py; pooling engines: engine/pooling/recovery.py).

An engine is dead when its status key has been missing for a grace: two missed status beats
and a margin. The candidates are the consumers of the model's request stream and the engines
registered for the model. "Missing" must mean dead, not "Redis was away": after an outage every
status key may be missing until the live engines publish theirs again, so the caller calls
``forget`` when Redis fails, and the grace counts again from the first check that reaches it.
One survivor takes over each dead engine, under a short lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import redis

from engine import protocol
from engine.redis_streams import as_str

REAP_LOCK_S = 30


class DeadEngines:
    def __init__(
        self,
        client: redis.Redis,
        keys: protocol.Keys,
        *,
        model: str,
        me: str,
        stream: str,
        group: str,
        grace_s: float,
    ):
        self.client, self.keys = client, keys
        self.model, self.me = model, me
        self.stream, self.group = stream, group
        self.grace_s = grace_s
        self._missing_since: dict[str, float] = {}  # engine id -> time.monotonic()

    def due(self) -> Iterator[str]:
        """The engines dead for ``grace_s`` whose takeover this engine has just locked: the
        caller takes each over before asking for the next."""
        now, names = time.monotonic(), set()
        try:
            consumers = self.client.xinfo_consumers(self.stream, self.group)
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
        for engine_id in missing:
            lock = self.keys.reaping(self.model, engine_id)
            if now - self._missing_since[engine_id] >= self.grace_s and self.client.set(
                lock, self.me, nx=True, ex=REAP_LOCK_S
            ):
                yield engine_id
                del self._missing_since[engine_id]

    def forget(self) -> None:
        """Redis was away: status keys missing across it prove nothing."""
        self._missing_since = {}


def not_run_again(lost: int, model: str, *, when: str = "") -> str:
    """What the client of a request ``lost`` engines died holding is told (``when``: ", before
    it produced a token", say): it may be what stops them, so no engine runs it again."""
    return (
        f"{lost} engines serving {model!r} stopped while they held this request{when}; it is "
        "not run again, in case it is what stops them (see the engine logs). Retry it if it "
        "is not."
    )
