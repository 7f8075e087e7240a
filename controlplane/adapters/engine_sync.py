"""Tell the engines about adapters: the per-model registry hash and the control stream.

Engines read ``Keys.adapters(model)`` (name -> AdapterRef) when they start and follow
``Keys.control(model)`` afterwards, so a new adapter is served, and a deleted one unloaded,
without restarting anything. Writes happen after the database commit, so an engine never
hears of an adapter the database does not have.
"""

from __future__ import annotations

import logging
import time

from django.db import transaction

from engine import protocol

logger = logging.getLogger(__name__)

# Engines read the registry hash when they start, so old control entries are only history.
CONTROL_RETENTION_S = 24 * 3600


def _keys() -> protocol.Keys:
    from django.conf import settings

    return protocol.Keys(settings.PLATFORM_REDIS_PREFIX)


def _redis():
    from controlplane.tenants.redis_clients import sync_redis

    return sync_redis()


def adapter_ref(*, name: str, checksum: str, path: str) -> protocol.AdapterRef:
    return protocol.AdapterRef(name=name, checksum=checksum, path=path)


def publish_adapter(*, model: str, ref: protocol.AdapterRef) -> None:
    """After commit: list the adapter for ``model``'s engines and ask them to load it now."""

    def publish() -> None:
        keys = _keys()
        try:
            pipe = _redis().pipeline()
            pipe.hset(keys.adapters(model), ref.name, protocol.encode(ref))
            pipe.xadd(
                keys.control(model),
                {protocol.FIELD: protocol.encode(protocol.LoadAdapter(adapter=ref))},
                minid=_min_id(),
                approximate=True,
            )
            pipe.execute()
        except Exception as exc:  # engines still load it on first use from the request's ref
            logger.warning("could not announce adapter %s to engines: %s", ref.name, exc)

    transaction.on_commit(publish)


def withdraw_adapter(*, model: str, name: str) -> None:
    """After commit: drop the adapter from ``model``'s registry and unload it in its engines."""

    def withdraw() -> None:
        keys = _keys()
        try:
            pipe = _redis().pipeline()
            pipe.hdel(keys.adapters(model), name)
            pipe.xadd(
                keys.control(model),
                {protocol.FIELD: protocol.encode(protocol.UnloadAdapter(name=name))},
                minid=_min_id(),
                approximate=True,
            )
            pipe.execute()
        except Exception as exc:
            logger.warning("could not withdraw adapter %s from engines: %s", name, exc)

    transaction.on_commit(withdraw)


def published_adapters(*, model: str) -> dict[str, protocol.AdapterRef]:
    """The registry as engines of ``model`` see it (name -> AdapterRef)."""
    raw = _redis().hgetall(_keys().adapters(model))
    return {k.decode(): protocol.decode_adapter(v) for k, v in raw.items()}


def _min_id() -> str:
    return f"{int((time.time() - CONTROL_RETENTION_S) * 1000)}-0"
