"""The engine's cache salt is bound to the tenant's secret salt on the server."""

from __future__ import annotations

import pytest

from controlplane.access import principals as access
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import tenant_rotate_cache_salt
from inference import credentials

pytestmark = pytest.mark.django_db(transaction=True)


async def _principal(secret):
    return await credentials.authenticate(f"Bearer {secret}", endpoint="completions")


async def test_client_salt_cannot_reach_another_tenant_cache(make_tenant, make_key):
    from asgiref.sync import sync_to_async

    a = await sync_to_async(make_tenant)("A")
    b = await sync_to_async(make_tenant)("B")
    alice = await _principal((await sync_to_async(make_key)(a))[1])
    bob = await _principal((await sync_to_async(make_key)(b))[1])
    a_salt = access.engine_cache_salt(alice, None)
    assert access.engine_cache_salt(bob, None) != a_salt
    # Bob sends Alice's stored salt, or Alice's engine salt: neither lands in Alice's cache.
    assert access.engine_cache_salt(bob, a.cache_salt) != a_salt
    assert access.engine_cache_salt(bob, a_salt) != a_salt
    # A client salt narrows sharing inside the tenant: same salt shares, another does not.
    assert access.engine_cache_salt(alice, "x") == access.engine_cache_salt(alice, "x")
    assert access.engine_cache_salt(alice, "x") != access.engine_cache_salt(alice, "y")
    assert access.engine_cache_salt(alice, "x") != a_salt


def test_rotating_the_salt_changes_the_engine_salt(make_tenant, make_key):
    from asgiref.sync import async_to_sync

    tenant = make_tenant("Rotating")
    _, secret = make_key(tenant)
    before = access.engine_cache_salt(async_to_sync(_principal)(secret), None)
    tenant_rotate_cache_salt(tenant=tenant)
    after = access.engine_cache_salt(async_to_sync(_principal)(secret), None)
    assert before != after
    assert Tenant.objects.get(pk=tenant.pk).cache_salt_rotated_at is not None
