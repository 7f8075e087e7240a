"""The engines' status records in Redis, read one way by everyone who asks which engines live.

Every engine refreshes ``Keys.status(model, engine_id)`` (an ``EngineStatus`` as JSON, with a
short TTL) each second: an engine is live while its key exists. Two ways to find the keys:

- ``read_engine_statuses`` / ``aread_engine_statuses``: the engines *registered* in the
  ``Keys.engines()`` set, one SMEMBERS and one MGET; what the API's admission, /metrics and the
  admin read on their paths.
- ``find_engine_statuses``: every record present, registered or not, found by SCAN (or the one
  key of ``engine_id``); what the readiness probe and the dashboard read.

Either way an expired record (its key gone between the listing and the MGET) is left out and a
garbled one is skipped with a warning, so one bad record never hides the others. Callers keep
their own clients (timeouts) and caches. Imports neither Django nor torch: the probe
(controlplane/metrics/engine_ready.py) runs without either.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis
import redis.asyncio as aioredis

from engine import protocol
from engine.protocol import EngineStatus, Keys

logger = logging.getLogger(__name__)


def decode_statuses(records: Iterable[bytes | None]) -> list[EngineStatus]:
    """The records decoded, in order; expired (None) and garbled ones left out."""
    statuses = []
    for data in records:
        if data is None:
            continue  # expired: the engine stopped publishing
        try:
            statuses.append(protocol.decode_status(data))
        except Exception:
            logger.warning("unreadable engine status record skipped", exc_info=True)
    return statuses


def registered_status_keys(members: Iterable[bytes], keys: Keys, model: str | None) -> list[str]:
    """The status keys of the engines in ``members`` (the engines set; of ``model`` if given),
    in member order."""
    pairs = [protocol.split_engine_member(m) for m in sorted(m.decode() for m in members)]
    return [keys.status(m, e) for m, e in pairs if model is None or m == model]


def read_engine_statuses(
    client: redis.Redis, keys: Keys, *, model: str | None = None
) -> list[EngineStatus]:
    """Live engines registered in the engines set (of ``model`` if given), in member order."""
    status_keys = registered_status_keys(client.smembers(keys.engines()), keys, model)
    return decode_statuses(client.mget(status_keys)) if status_keys else []


async def aread_engine_statuses(
    client: aioredis.Redis, keys: Keys, *, model: str | None = None
) -> list[EngineStatus]:
    """``read_engine_statuses`` for asyncio clients."""
    members = await client.smembers(keys.engines())
    status_keys = registered_status_keys(members, keys, model)
    return decode_statuses(await client.mget(status_keys)) if status_keys else []


def find_engine_statuses(
    client: redis.Redis,
    keys: Keys,
    *,
    model: str | None = None,
    engine_id: str | None = None,
) -> list[EngineStatus]:
    """Every live record (of ``model``; the one of ``engine_id`` when both are given), found by
    its key whether or not the engine registered; in key order."""
    if model is not None and engine_id is not None:
        status_keys = [keys.status(model, engine_id)]
    else:
        status_keys = sorted(
            k.decode() for k in client.scan_iter(match=keys.status_pattern(model), count=500)
        )
    return decode_statuses(client.mget(status_keys)) if status_keys else []


def any_engine_live(
    client: redis.Redis, keys: Keys, *, model: str, include_draining: bool = True
) -> bool:
    """Is an engine of ``model`` publishing its status (draining ones too, unless told not)?"""
    return any(
        include_draining or not status.draining
        for status in find_engine_statuses(client, keys, model=model)
    )
