"""Tell the engines about adapters: the per-model registry hash and the control stream.

Engines reconcile what they hold with ``Keys.adapters(model)`` (name -> AdapterRef) when they
start and every few seconds, and follow ``Keys.control(model)`` for changes at once, so a new
adapter is served, and a deleted one unloaded, without restarting anything. Writes happen
after the database commit, so an engine never hears of an adapter the database does not have.
``registry_reconcile`` (Celery beat, and ``serve`` at start) rewrites every hash from the
database, so a lost write or a restarted Redis heals within one beat.
"""

from __future__ import annotations

import logging
import time

import redis
from django.db import transaction

from engine import protocol

logger = logging.getLogger(__name__)

# Engines read the registry hash when they start, so old control entries are only history.
CONTROL_RETENTION_S = 24 * 3600


def _keys() -> protocol.Keys:
    from django.conf import settings

    return protocol.Keys(settings.PLATFORM_REDIS_PREFIX)


def _redis():
    from controlplane.common.redis_clients import sync_redis

    return sync_redis()


def adapter_ref(*, name: str, checksum: str, path: str) -> protocol.AdapterRef:
    return protocol.AdapterRef(name=name, checksum=checksum, path=path)


def publish_adapter(*, model: str, ref: protocol.AdapterRef) -> None:
    """After commit: list the adapter for ``model``'s engines and ask them to load it now."""
    transaction.on_commit(lambda: _write_after_commit(model, load=[ref]))


def withdraw_adapter(*, model: str, name: str) -> None:
    """After commit: drop the adapter from ``model``'s registry and unload it in its engines."""
    transaction.on_commit(lambda: _write_after_commit(model, unload=[name]))


def _write_after_commit(model: str, *, load=(), unload=()) -> None:
    try:
        pipe = _redis().pipeline()
        _write(pipe, _keys(), model, load=load, unload=unload)
        pipe.execute()
    except Exception as exc:  # the engines' reconcile and registry_reconcile repair it
        names = [r.name for r in load] + list(unload)
        logger.warning("could not tell engines of %s about adapters %s: %s", model, names, exc)


def _write(pipe, keys: protocol.Keys, model: str, *, load=(), unload=()) -> None:
    """Queue on ``pipe``: the registry change and its control message, for each adapter."""
    key, control = keys.adapters(model), keys.control(model)
    messages: list[protocol.ControlMessage] = []
    for ref in load:
        pipe.hset(key, ref.name, protocol.encode(ref))
        messages.append(protocol.LoadAdapter(adapter=ref))
    for name in unload:
        pipe.hdel(key, name)
        messages.append(protocol.UnloadAdapter(name=name))
    for message in messages:
        fields = {protocol.FIELD: protocol.encode(message)}
        pipe.xadd(control, fields, minid=_min_id(), approximate=True)


def published_adapters(*, model: str) -> dict[str, protocol.AdapterRef]:
    """The registry as engines of ``model`` see it (name -> AdapterRef)."""
    raw = _redis().hgetall(_keys().adapters(model))
    return {k.decode(): protocol.decode_adapter(v) for k, v in raw.items()}


def registry_reconcile() -> int:
    """Make every served model's registry hash list exactly its ready adapters, and announce
    each difference on the control stream; returns the number of differences.

    Adapters being validated (again) are left as they are: their validation publishes or
    withdraws them. Hashes of models the database no longer has are emptied.
    """
    from controlplane.deployments.selectors import served_model_names

    client, keys = _redis(), _keys()
    models = set(served_model_names())
    stale = client.scan_iter(match=keys.adapters("*"), count=500)
    models.update(k.decode().removeprefix(keys.adapters("")) for k in stale)
    changes = sum(_reconcile_model(client, keys, model) for model in sorted(models))
    if changes:
        logger.info("adapter registry reconciled: %d differences repaired", changes)
    return changes


def _reconcile_model(client, keys: protocol.Keys, model: str, attempts: int = 5) -> int:
    key = keys.adapters(model)
    for _ in range(attempts):
        with client.pipeline() as pipe:
            try:
                # The hash is read (and watched) before the database: a publish or withdraw
                # landing in between makes EXEC fail and the round run again.
                pipe.watch(key)
                published = pipe.hgetall(key)
                wanted, unsettled = _wanted(model)
                keep = wanted.keys() | unsettled
                unload = [n for n in (k.decode() for k in published) if n not in keep]
                load = [
                    r for n, r in wanted.items() if published.get(n.encode()) != protocol.encode(r)
                ]
                if not load and not unload:
                    return 0
                pipe.multi()
                _write(pipe, keys, model, load=load, unload=unload)
                pipe.execute()
                return len(load) + len(unload)
            except redis.WatchError:
                continue
    logger.warning("adapter registry of %s kept changing; reconciled next time", model)
    return 0


def _wanted(model: str) -> tuple[dict[str, protocol.AdapterRef], set[str]]:
    """The ready adapters of ``model`` by name, and the names being (re)validated."""
    from controlplane.adapters.models import Adapter
    from controlplane.adapters.selectors import adapter_registry_rows

    wanted, unsettled = {}, set()
    for name, state, checksum, path in adapter_registry_rows(base_model=model):
        if state == Adapter.State.READY:
            wanted[name] = adapter_ref(name=name, checksum=checksum, path=path)
        elif state in (Adapter.State.UPLOADED, Adapter.State.VALIDATING):
            unsettled.add(name)
    return wanted, unsettled


def _min_id() -> str:
    return f"{int((time.time() - CONTROL_RETENTION_S) * 1000)}-0"
