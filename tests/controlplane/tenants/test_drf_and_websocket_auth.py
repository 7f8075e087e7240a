"""The DRF authentication class and WebSocket handshakes authenticate the same keys."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from controlplane.tenants.authentication import ApiKeyAuthentication
from controlplane.tenants.models import Tenant
from inference import access
from inference.access import AccessError


class WhoAmI(APIView):
    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [IsAuthenticated]
    api_scope = "models"

    def get(self, request):
        return Response({"tenant": request.user.tenant_slug, "key": request.auth.key_prefix})


def _get(authorization=None):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = WhoAmI.as_view()(APIRequestFactory().get("/whoami", **headers))
    response.render()
    return response


@pytest.mark.django_db
def test_drf_class_accepts_keys_and_answers_openai_errors(make_tenant, make_key):
    tenant = make_tenant("Acme")
    key, secret = make_key(tenant)
    ok = _get(f"Bearer {secret}")
    assert ok.status_code == 200 and ok.data == {"tenant": "acme", "key": key.prefix}

    bad = _get("Bearer sk-deadbeefnotakey")
    assert bad.status_code == 401
    assert bad["WWW-Authenticate"] == 'Bearer realm="api"'
    assert bad.data == {
        "error": {
            "message": bad.data["error"]["message"],
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    # No key at all: "not mine", so the permission check answers 401 with the challenge.
    assert _get().status_code == 401

    _, scoped = make_key(tenant, scopes=["embeddings"])
    forbidden = _get(f"Bearer {scoped}")
    assert forbidden.status_code == 403
    assert forbidden.data["error"]["code"] == "insufficient_scope"


def _scope(headers=(), query=b""):
    return {"type": "websocket", "headers": list(headers), "query_string": query}


@pytest.mark.django_db(transaction=True)
async def test_websocket_handshake_accepts_bearer_or_query_key(make_tenant, make_key):
    tenant = await sync_to_async(make_tenant)("Acme")
    _, secret = await sync_to_async(make_key)(tenant)
    by_header = await access.authenticate_websocket(
        _scope([(b"authorization", f"Bearer {secret}".encode())])
    )
    by_query = await access.authenticate_websocket(_scope(query=f"api_key={secret}".encode()))
    assert by_header.tenant_id == by_query.tenant_id == tenant.pk
    with pytest.raises(AccessError) as info:
        await access.authenticate_websocket(_scope())
    assert info.value.status == 401


@pytest.mark.django_db(transaction=True)
async def test_staff_session_gets_a_private_playground_tenant(client, django_user_model):
    staff = await sync_to_async(django_user_model.objects.create_user)(
        "ops", password="pw-123456", is_staff=True
    )
    plain = await sync_to_async(django_user_model.objects.create_user)("bob", password="pw-123456")

    async def cookie_for(user):
        await sync_to_async(client.force_login)(user)
        value = client.cookies[settings.SESSION_COOKIE_NAME].value
        return [(b"cookie", f"{settings.SESSION_COOKIE_NAME}={value}".encode())]

    principal = await access.authenticate_websocket(_scope(await cookie_for(staff)))
    tenant = await Tenant.objects.aget(pk=principal.tenant_id)
    assert tenant.playground_user_id == staff.pk and principal.key_id == 0
    again = await access.authenticate_websocket(_scope(await cookie_for(staff)))
    assert again.tenant_id == principal.tenant_id and again.cache_salt == principal.cache_salt

    same_site = [(b"host", b"platform.test"), (b"origin", b"https://platform.test")]
    cookie = await cookie_for(staff)
    assert (await access.authenticate_websocket(_scope(cookie + same_site))).key_id == 0
    cross_site = [(b"host", b"platform.test"), (b"origin", b"https://evil.test")]
    with pytest.raises(AccessError):
        await access.authenticate_websocket(_scope(cookie + cross_site))

    with pytest.raises(AccessError):
        await access.authenticate_websocket(_scope(await cookie_for(plain)))
    forged = [(b"cookie", f"{settings.SESSION_COOKIE_NAME}=not-a-session".encode())]
    with pytest.raises(AccessError):
        await access.authenticate_websocket(_scope(forged))
