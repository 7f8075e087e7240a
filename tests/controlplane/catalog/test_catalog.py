"""The model catalog each API process caches: what it holds, that lookups on it cost no
database query, and that registrations, grants and revocations reach another process within
about a second."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from controlplane.access.principals import Principal
from controlplane.adapters.models import Adapter
from controlplane.adapters.services import (
    adapter_delete,
    adapter_grant,
    adapter_register,
    adapter_revoke_grant,
)
from controlplane.catalog import cache as catalog
from controlplane.catalog.cache import CatalogCache, catalog_load, catalog_snapshot
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import (
    embedding_model_register,
    served_model_register,
    served_model_update,
)
from engine.tooling.random_lora import make_random_adapter
from inference.catalog import resolve_model, visible_models
from tests.support.engine_status import publish_engine_status
from tests.support.generation_factories import make_principal

pytestmark = pytest.mark.django_db(transaction=True)


def _principal(tenant) -> Principal:
    return make_principal(tenant.slug, tenant_id=tenant.pk)


def test_the_snapshot_holds_active_models_and_granted_ready_adapters(
    served, tiny_llama, django_assert_num_queries
):
    embedding_model_register(name="minilm")
    retired = served_model_register(path=tiny_llama, name="retired")
    served_model_update(model=retired, is_active=False)

    with django_assert_num_queries(4):  # models, adapters, staff playgrounds, prefixes
        snapshot = catalog_load()

    assert list(snapshot.models) == ["minilm", "tiny-llama"]
    assert snapshot.models["minilm"].is_embedding
    assert not snapshot.models["tiny-llama"].is_embedding
    assert snapshot.models["tiny-llama"].path == served.base.path
    route = snapshot.adapter_route(tenant_id=served.tenant_a.pk, name="bot")
    assert route is not None and route.base_model == "tiny-llama"
    assert snapshot.adapter_routes(tenant_id=served.tenant_a.pk) == [route]
    # Another tenant's adapter and an unknown name look the same.
    assert snapshot.adapter_route(tenant_id=served.tenant_b.pk, name="bot") is None
    assert snapshot.adapter_route(tenant_id=served.tenant_a.pk, name="nope") is None
    assert snapshot.adapter_routes(tenant_id=served.tenant_b.pk) == []


def test_adapters_not_ready_or_on_an_inactive_base_are_left_out(served, tiny_llama, tmp_path):
    adapter_register(
        path=make_random_adapter(tiny_llama, tmp_path / "new", rank=8),
        name="not-validated-yet",
        base=served.base,
        tenants=[served.tenant_a],
        enqueue=False,
    )
    assert list(catalog_load().adapters) == ["bot"]
    served_model_update(model=served.base, is_active=False)
    snapshot = catalog_load()
    assert not snapshot.models and not snapshot.adapters


async def test_lookups_on_a_cached_catalog_query_no_database(
    served, monkeypatch, redis_client, settings
):
    principal = _principal(served.tenant_a)
    await resolve_model(principal, "tiny-llama")
    bot = await Adapter.objects.aget(pk=served.adapter.pk)
    publish_engine_status(  # /v1/models lists an adapter once a live engine serves it
        redis_client,
        prefix=settings.PLATFORM_REDIS_PREFIX,
        model="tiny-llama",
        adapters={"bot": bot.checksum},
    )

    def no_db():
        raise AssertionError("the database was queried on a cached catalog")

    monkeypatch.setattr(catalog, "catalog_load", no_db)
    for _ in range(20):
        assert (await resolve_model(principal, "tiny-llama")).adapter is None
        assert (await resolve_model(principal, "bot", with_adapters=True)).engine_model == (
            "tiny-llama"
        )
        listed = await visible_models(principal, with_adapters=True)
        assert [m.name for m in listed] == ["tiny-llama", "bot"]


def test_the_synchronous_read_queries_no_database_once_cached(served, django_assert_num_queries):
    catalog_snapshot()
    with django_assert_num_queries(0):
        for _ in range(20):
            assert "tiny-llama" in catalog_snapshot().models


def _visible_within_a_second(cache: CatalogCache, check) -> None:
    start = time.monotonic()
    while not check(cache.get()):
        assert time.monotonic() - start < 5, "change not visible within 5 s"
        time.sleep(0.05)
    assert time.monotonic() - start <= 1.0


def test_changes_reach_another_process_cache_within_the_epoch_interval(
    served, tiny_llama, settings
):
    """A second CatalogCache stands for another API process sharing Redis."""
    settings.AUTH_EPOCH_CHECK_SECONDS = 0.5
    other = CatalogCache()
    a, b = served.tenant_a.pk, served.tenant_b.pk
    assert other.get().adapter_route(tenant_id=a, name="bot") is not None

    adapter_grant(adapter=served.adapter, tenant=served.tenant_b)
    _visible_within_a_second(other, lambda c: c.adapter_route(tenant_id=b, name="bot"))

    adapter_revoke_grant(adapter=served.adapter, tenant=served.tenant_a)
    _visible_within_a_second(other, lambda c: not c.adapter_route(tenant_id=a, name="bot"))

    second = served_model_register(path=tiny_llama, name="second")
    _visible_within_a_second(other, lambda c: "second" in c.models)

    served_model_update(model=second, is_active=False)
    _visible_within_a_second(other, lambda c: "second" not in c.models)

    adapter_delete(adapter=served.adapter)
    _visible_within_a_second(other, lambda c: not c.adapters)


async def test_this_process_sees_its_own_writes_at_once(served):
    principal = _principal(served.tenant_b)
    assert [m.name for m in await visible_models(principal, with_adapters=True)] == ["tiny-llama"]
    await sync_to_async(adapter_grant)(adapter=served.adapter, tenant=served.tenant_b)
    assert (await resolve_model(principal, "bot", with_adapters=True)).name == "bot"


def test_max_age_bounds_a_change_whose_bump_was_lost(served):
    cache = CatalogCache(max_age=0.3)
    assert "tiny-llama" in cache.get().models
    ServedModel.objects.filter(pk=served.base.pk).update(is_active=False)  # no service, no bump
    assert "tiny-llama" in cache.get().models
    time.sleep(0.35)
    assert "tiny-llama" not in cache.get().models


def test_the_catalog_is_served_while_redis_is_unreachable(served, settings, monkeypatch):
    cache = CatalogCache()
    cache.get()
    monkeypatch.setattr(catalog, "catalog_load", lambda: pytest.fail("reloaded"))
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    time.sleep(0.25)  # the epoch check is due again
    assert "tiny-llama" in cache.get().models
