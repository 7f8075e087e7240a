"""The Redis key names of the protocol between API processes and engines, and the ids that go
into them. Part of engine.protocol, which re-exports everything here (docs/protocol.md lists the
keys); torch-free, as API processes import it."""

from __future__ import annotations

import os
import socket
import uuid


def redis_prefix() -> str:
    return os.environ.get("PLATFORM_REDIS_PREFIX", "llmp")


class Keys:
    """Key names under one prefix (``PLATFORM_REDIS_PREFIX``, default ``llmp``)."""

    def __init__(self, prefix: str | None = None):
        self.prefix = prefix if prefix is not None else redis_prefix()

    def requests(self, model: str) -> str:
        """Stream of GenerateRequest for one served model, read by the group ENGINE_GROUP."""
        return f"{self.prefix}:requests:{model}"

    def direct_requests(self, model: str, engine_id: str) -> str:
        """Stream of GenerateRequest the API routed to one engine because it holds their
        prefix cached (inference/transport/prefix_router.py); read by that engine alone,
        through the group ENGINE_GROUP, beside the shared stream. A dead or departing
        engine's entries move back to the shared stream (engine/service/recovery.py)."""
        return f"{self.prefix}:direct:{model}:{engine_id}"

    def prefix_index(self, model: str, engine_id: str) -> str:
        """Set of the (salted) block hashes, cut to PREFIX_INDEX_BYTES, that the engine holds
        in its prefix cache: what the API's router asks before choosing a replica."""
        return f"{self.prefix}:prefix-index:{model}:{engine_id}"

    def outputs(self, frontend_id: str) -> str:
        """Stream of OutputBatch for one frontend process; trimmed by its reader."""
        return f"{self.prefix}:outputs:{frontend_id}"

    def frontends(self, model: str) -> str:
        """Sorted set: frontend id -> the time (Unix seconds) it last read the model's engines
        to send a request; how many API processes share a tenant's room in the engines'
        queues (inference/transport/tenant_backlog.py). Written by frontends, which drop
        marks older than protocol.FRONTEND_WINDOW_S as they write; engines read its size to size their
        read-ahead (engine/service/read_ahead.py)."""
        return f"{self.prefix}:frontends:{model}"

    def control(self, model: str) -> str:
        """Broadcast stream of control commands (adapters, drain) every engine of a model reads."""
        return f"{self.prefix}:control:{model}"

    def idle(self, model: str) -> str:
        """Broadcast stream of Idle, from the model's engines to its engines (hand-overs of
        waiting requests: engine/service/hand_over.py); capped to its last protocol.IDLE_STREAM_LEN."""
        return f"{self.prefix}:idle:{model}"

    def aborts(self) -> str:
        """Broadcast stream of AbortRequest, read by every engine of every model."""
        return f"{self.prefix}:aborts"

    def aborted(self, request_id: str) -> str:
        """Marker (with a TTL) that a request was aborted, for engines that have not read it yet."""
        return f"{self.prefix}:aborted:{request_id}"

    def status(self, model: str, engine_id: str) -> str:
        """EngineStatus as JSON with a short TTL: the engine is alive while this key exists."""
        return f"{self.prefix}:status:{model}:{engine_id}"

    def status_pattern(self, model: str | None = None) -> str:
        return f"{self.prefix}:status:{model or '*'}:*"

    def engines(self) -> str:
        """Set of ``model:engine_id`` of every engine started and not yet cleaned up."""
        return f"{self.prefix}:engines"

    def started(self, model: str, engine_id: str) -> str:
        """Hash: request stream entry id -> StartedRecord for requests that produced output."""
        return f"{self.prefix}:started:{model}:{engine_id}"

    def reaping(self, model: str, engine_id: str) -> str:
        """Lock held by the one survivor that recovers a dead engine's requests."""
        return f"{self.prefix}:reaping:{model}:{engine_id}"

    def written(self, model: str, engine_id: str) -> str:
        """The sequence number of the engine's last output write (engine/service/redis_output.py)."""
        return f"{self.prefix}:written:{model}:{engine_id}"

    def adapters(self, model: str) -> str:
        """Hash: adapter name -> AdapterRef, the adapters engines of a model should serve."""
        return f"{self.prefix}:adapters:{model}"


def engine_member(model: str, engine_id: str) -> str:
    return f"{model}:{engine_id}"


def split_engine_member(member: str) -> tuple[str, str]:
    """Inverse of engine_member; engine ids never contain ':' (see new_engine_id)."""
    model, _, engine_id = member.rpartition(":")
    return model, engine_id


def next_stream_id(entry_id: bytes | str) -> str:
    """The smallest stream id after ``entry_id``: XTRIM MINID keeps ids >= it."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def new_engine_id() -> str:
    host = socket.gethostname().replace(":", "-")[:32]
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def new_frontend_id() -> str:
    return new_engine_id()
