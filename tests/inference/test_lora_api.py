"""LoRA adapters as API models: the catalog lists and routes a tenant's ready adapters.

``model="<adapter>"`` resolves to an entry served by the base model's engines (its request
stream) with the adapter's name, checksum and path for the engine; tenants without the grant,
unknown names and adapters not (yet) ready are one and the same 404. /v1/models lists an
adapter once a live engine serves it (tests/inference/test_lora_serving.py).
"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from controlplane.access.principals import Principal
from controlplane.adapters import services
from controlplane.adapters.models import Adapter
from controlplane.adapters.tasks import validate_adapter
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import served_model_update
from controlplane.tenants.services import tenant_create
from engine.lora.validation import adapter_checksum
from engine.tooling.random_lora import make_random_adapter
from inference.catalog import resolve_model, visible_models
from inference.errors import ApiError
from tests.support.engine_status import publish_engine_status

pytestmark = pytest.mark.django_db(transaction=True)


def _principal(tenant, allowed_models=None) -> Principal:
    return Principal(
        key_id=1,
        key_prefix="sk-test",
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        cache_salt=tenant.cache_salt,
        allowed_models=allowed_models,
    )


@pytest.fixture
def served(redis_client, tiny_llama, settings, tmp_path):
    settings.ADAPTER_UPLOAD_DIR = str(tmp_path / "uploads")
    base = ServedModel.objects.create(
        name="tiny-llama", path=str(tiny_llama), architecture="LlamaForCausalLM"
    )
    tenant_a, tenant_b = tenant_create(name="Tenant A"), tenant_create(name="Tenant B")
    adapter_dir = make_random_adapter(tiny_llama, tmp_path / "support", rank=8)
    adapter = services.adapter_register(
        path=adapter_dir, name="support-bot", base=base, tenants=[tenant_a], enqueue=False
    )
    return base, tenant_a, tenant_b, adapter, adapter_dir


async def _resolve(principal, name):
    return await resolve_model(principal, name, with_adapters=True)


async def test_granted_ready_adapter_routes_to_its_base_model(served):
    base, tenant_a, tenant_b, adapter, adapter_dir = served
    a, b = _principal(tenant_a), _principal(tenant_b)
    # Not validated yet: not servable, so not found.
    with pytest.raises(ApiError) as exc:
        await _resolve(a, "support-bot")
    assert exc.value.status == 404

    assert await sync_to_async(validate_adapter)(adapter.pk) == "ready"
    entry = await _resolve(a, "support-bot")
    assert entry.name == "support-bot"
    assert entry.engine_model == "tiny-llama" and entry.parent == "tiny-llama"
    assert entry.path == base.path and not entry.is_embedding
    assert entry.adapter.checksum == adapter_checksum(adapter_dir)
    assert entry.adapter.path == str(adapter_dir.resolve())

    # Tenant B: the same 404 as for a name that does not exist at all.
    for name in ("support-bot", "no-such-adapter"):
        with pytest.raises(ApiError) as exc:
            await _resolve(b, name)
        assert exc.value.status == 404
    # Base models resolve as before, and without with_adapters adapters stay invisible.
    assert (await _resolve(b, "tiny-llama")).adapter is None
    with pytest.raises(ApiError):
        await resolve_model(a, "support-bot")


async def test_models_list_shows_each_tenant_its_adapters(served, redis_client, settings):
    _, tenant_a, tenant_b, adapter, adapter_dir = served

    await sync_to_async(validate_adapter)(adapter.pk)
    # Listed once a live engine of the base model has loaded it (its status record says so).
    publish_engine_status(
        redis_client,
        prefix=settings.PLATFORM_REDIS_PREFIX,
        model="tiny-llama",
        adapters={"support-bot": adapter_checksum(adapter_dir)},
    )
    listed_a = await visible_models(_principal(tenant_a), with_adapters=True)
    assert [(m.name, m.parent) for m in listed_a] == [
        ("tiny-llama", None),
        ("support-bot", "tiny-llama"),
    ]
    listed_b = await visible_models(_principal(tenant_b), with_adapters=True)
    assert [m.name for m in listed_b] == ["tiny-llama"]
    # A grant limited to other models still lists the tenant's adapters, never the base.
    restricted = await visible_models(
        _principal(tenant_a, allowed_models=frozenset()), with_adapters=True
    )
    assert [m.name for m in restricted] == ["support-bot"]


async def test_failed_or_deactivated_adapters_are_not_served(served, tiny_llama, tmp_path):
    base, tenant_a, _, adapter, _ = served

    await sync_to_async(validate_adapter)(adapter.pk)
    big = make_random_adapter(tiny_llama, tmp_path / "big", rank=128)
    failed = await sync_to_async(services.adapter_register)(
        path=big, name="too-big", base=base, tenants=[tenant_a], enqueue=False
    )
    assert await sync_to_async(validate_adapter)(failed.pk) == "failed"
    await failed.arefresh_from_db()
    assert failed.state == Adapter.State.FAILED and "rank" in failed.failure_reason
    with pytest.raises(ApiError):
        await _resolve(_principal(tenant_a), "too-big")
    await sync_to_async(served_model_update)(model=base, is_active=False)
    with pytest.raises(ApiError):
        await _resolve(_principal(tenant_a), "support-bot")
    assert await visible_models(_principal(tenant_a), with_adapters=True) == []
