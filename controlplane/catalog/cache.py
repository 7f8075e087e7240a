"""The model catalog every API process caches: served models, the adapters tenants may call, and
the active shared prefixes (controlplane/shared_prefixes/).

Every request looks its model up, so each process keeps one snapshot of the catalog (loaded in
four queries, five while shared prefixes are active) and never queries the database for it in
steady state. As with the key cache (controlplane/access/keycache.py), every write that changes
what the snapshot holds bumps the *catalog epoch* in Redis after commit (``catalog_epoch_bump``
in common/redis_epoch.py: the served-model, adapter and shared-prefix services call it), each
process re-reads the epoch at most every ``AUTH_EPOCH_CHECK_SECONDS`` (default 0.5 s), and
``max_age`` bounds staleness should a bump be lost. While Redis is unreachable the snapshot is
still served, reloaded from the database every max_age.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from controlplane.adapters.selectors import AdapterRoute, adapter_routes_granted
from controlplane.common.redis_epoch import CATALOG_EPOCH, RedisEpoch, epoch_subscribe
from controlplane.deployments.models import ServedModel
from controlplane.deployments.selectors import served_models_by_name
from controlplane.shared_prefixes.selectors import SharedPrefixRecord, shared_prefixes_active


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """An active served model, detached from the ORM so it can be cached."""

    name: str
    path: str
    architecture: str
    max_model_len: int
    created: int  # Unix time, for /v1/models
    is_embedding: bool  # served by a pooling engine (/v1/embeddings, /v1/rerank, /v1/score)
    completions_only: bool = False  # no chat template: /v1/completions only
    tool_parser: str = "hermes"  # how tool_choice "auto" reads calls (tool_parsers.py)
    reasoning_parser: str = ""  # how thinking is told from the answer (reasoning_parsers.py)
    drop_attribution_header: bool = True  # Claude Code's per-turn line (inference/messages/)
    is_cross_encoder: bool = False  # a reranker: pair scores, no embeddings


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """What requests may name, as of one load.

    ``models``: the active served models by name, in name order. ``adapters``: the ready
    adapters, by name, in name order, each with the ids of the tenants that may call it (those
    granted it, and staff users' playground tenants); every adapter's base model is in
    ``models``. ``shared_prefixes``: the active shared prefixes, by name and newest version
    first.
    """

    models: Mapping[str, CatalogModel]
    adapters: Mapping[str, tuple[AdapterRoute, frozenset[int]]]
    shared_prefixes: tuple[SharedPrefixRecord, ...] = ()

    def adapter_route(self, *, tenant_id: int, name: str) -> AdapterRoute | None:
        """The adapter ``name`` if granted to the tenant; None for unknown and not granted
        alike, so adapter names do not leak across tenants."""
        route, tenants = self.adapters.get(name, (None, frozenset()))
        return route if tenant_id in tenants else None

    def adapter_routes(self, *, tenant_id: int) -> list[AdapterRoute]:
        """The adapters granted to the tenant, in name order."""
        return [route for route, tenants in self.adapters.values() if tenant_id in tenants]


def _catalog_model(model: ServedModel) -> CatalogModel:
    return CatalogModel(
        name=model.name,
        path=model.path,
        architecture=model.architecture,
        max_model_len=model.max_model_len,
        created=int(model.created_at.timestamp()),
        is_embedding=model.is_embedding,
        completions_only=model.completions_only,
        tool_parser=model.effective_tool_parser,
        reasoning_parser=model.reasoning_parser,
        drop_attribution_header=model.drop_attribution_header,
        is_cross_encoder=model.is_cross_encoder,
    )


def catalog_load() -> CatalogSnapshot:
    """Read the catalog from the database (four queries; five with active shared prefixes)."""
    active = served_models_by_name()
    models = {m.name: _catalog_model(m) for m in active}
    # A base deactivated between the two queries takes its adapters with it.
    adapters = {
        route.name: (route, tenants)
        for route, tenants in adapter_routes_granted().items()
        if route.base_model in models
    }
    return CatalogSnapshot(
        models=models, adapters=adapters, shared_prefixes=shared_prefixes_active()
    )


class CatalogCache:
    """One snapshot, valid while its epoch is the current one and it is younger than max_age."""

    def __init__(self, *, max_age: float = 60.0):
        self.max_age = max_age
        self.epoch = RedisEpoch(CATALOG_EPOCH)
        # (snapshot, the epoch read before loading it, when): one attribute, swapped whole.
        self._entry: tuple[CatalogSnapshot, int, float] | None = None

    def invalidate_local(self) -> None:
        """Forget the snapshot and re-read the epoch on the next lookup."""
        self._entry = None
        self.epoch.check_soon()

    def _cached(self, now: float) -> CatalogSnapshot | None:
        entry = self._entry
        if entry is None:
            return None
        snapshot, epoch, loaded_at = entry
        if epoch != self.epoch.value or now - loaded_at > self.max_age:
            return None
        return snapshot

    def _load(self, now: float) -> CatalogSnapshot:
        # sync_to_async runs this on one thread, so requests that queued behind a load find its
        # snapshot here rather than loading again.
        snapshot = self._cached(now)
        if snapshot is None:
            epoch = self.epoch.value  # read before the load: a bump during it makes this stale
            snapshot = catalog_load()
            self._entry = (snapshot, epoch, now)
        return snapshot

    async def aget(self) -> CatalogSnapshot:
        now = time.monotonic()
        await self.epoch.arefresh(now)
        snapshot = self._cached(now)
        if snapshot is None:
            snapshot = await sync_to_async(self._load)(now)
        return snapshot

    def get(self) -> CatalogSnapshot:
        now = time.monotonic()
        self.epoch.refresh(now)
        snapshot = self._cached(now)
        if snapshot is None:
            snapshot = self._load(now)
        return snapshot


catalog_cache = CatalogCache()
# A write in this process (catalog_epoch_bump) drops this process's snapshot at once.
epoch_subscribe(CATALOG_EPOCH, catalog_cache.invalidate_local)


async def acatalog_snapshot() -> CatalogSnapshot:
    """This process's catalog; no database query while it is current."""
    return await catalog_cache.aget()


def catalog_snapshot() -> CatalogSnapshot:
    return catalog_cache.get()
