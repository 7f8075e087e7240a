"""WebSocket handshakes: a Bearer header, ?api_key= or a same-site staff session cookie."""
# ruff: noqa: F811  (the fixtures imported from tests.support.tenant_fixtures are parameters here)

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import Permission

from controlplane.access.principals import AccessError
from controlplane.tenants.models import Tenant
from inference import credentials
from tests.support.tenant_fixtures import _fresh_key_cache, make_key, make_tenant  # noqa: F401 (fixtures)


def _scope(headers=(), query=b""):
    return {"type": "websocket", "headers": list(headers), "query_string": query}


@pytest.mark.django_db(transaction=True)
async def test_websocket_handshake_accepts_bearer_or_query_key(make_tenant, make_key):
    tenant = await sync_to_async(make_tenant)("Acme")
    _, secret = await sync_to_async(make_key)(tenant)
    by_header = await credentials.authenticate_websocket(
        _scope([(b"authorization", f"Bearer {secret}".encode())])
    )
    by_query = await credentials.authenticate_websocket(_scope(query=f"api_key={secret}".encode()))
    assert by_header.tenant_id == by_query.tenant_id == tenant.pk
    with pytest.raises(AccessError) as info:
        await credentials.authenticate_websocket(_scope())
    assert info.value.status == 401


@pytest.mark.django_db(transaction=True)
async def test_staff_session_gets_a_private_playground_tenant(client, django_user_model):
    staff = await sync_to_async(django_user_model.objects.create_user)(
        "ops", password="pw-123456", is_staff=True
    )
    # Staff need the playground permission (superusers hold it implicitly).
    await sync_to_async(staff.user_permissions.add)(
        await Permission.objects.aget(codename="use_playground")
    )
    plain = await sync_to_async(django_user_model.objects.create_user)("bob", password="pw-123456")

    async def cookie_for(user):
        await sync_to_async(client.force_login)(user)
        value = client.cookies[settings.SESSION_COOKIE_NAME].value
        return [(b"cookie", f"{settings.SESSION_COOKIE_NAME}={value}".encode())]

    principal = await credentials.authenticate_websocket(_scope(await cookie_for(staff)))
    tenant = await Tenant.objects.aget(pk=principal.tenant_id)
    assert tenant.playground_user_id == staff.pk and principal.key_id == 0
    again = await credentials.authenticate_websocket(_scope(await cookie_for(staff)))
    assert again.tenant_id == principal.tenant_id and again.cache_salt == principal.cache_salt

    same_site = [(b"host", b"platform.test"), (b"origin", b"https://platform.test")]
    cookie = await cookie_for(staff)
    assert (await credentials.authenticate_websocket(_scope(cookie + same_site))).key_id == 0
    cross_site = [(b"host", b"platform.test"), (b"origin", b"https://evil.test")]
    with pytest.raises(AccessError):
        await credentials.authenticate_websocket(_scope(cookie + cross_site))

    with pytest.raises(AccessError):
        await credentials.authenticate_websocket(_scope(await cookie_for(plain)))
    forged = [(b"cookie", f"{settings.SESSION_COOKIE_NAME}=not-a-session".encode())]
    with pytest.raises(AccessError):
        await credentials.authenticate_websocket(_scope(forged))
