"""A stand-in for a live engine: its status record, as the API and the admin read it."""

from __future__ import annotations

import time
from collections.abc import Mapping

import redis

from engine import protocol


def publish_engine_status(
    client: redis.Redis,
    *,
    prefix: str,
    model: str,
    adapters: Mapping[str, str] | None = None,
    engine_id: str = "fake-engine",
    ttl_s: float = 30.0,
) -> str:
    """Write the status record of a live engine of ``model`` holding ``adapters`` (name ->
    checksum) and register it, as a real engine does every second; returns the status key."""
    adapters = dict(adapters or {})
    keys = protocol.Keys(prefix)
    status = protocol.EngineStatus(
        engine_id=engine_id,
        model=model,
        adapters=sorted(adapters),
        adapter_checksums=adapters,
        max_num_seqs=8,
        updated_at=time.time(),
    )
    key = keys.status(model, engine_id)
    client.set(key, protocol.encode_status(status), px=int(ttl_s * 1000))
    client.sadd(keys.engines(), protocol.engine_member(model, engine_id))
    return key
