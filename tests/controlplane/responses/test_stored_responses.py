"""Stored responses: reachable only through the tenant that made them; read-only in the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from controlplane.common.api_error import ApiError
from controlplane.responses.models import StoredResponse
from controlplane.responses.services import response_delete, response_get, response_store

pytestmark = pytest.mark.django_db


def _store(tenant, response_id="resp_1"):
    return response_store(
        tenant_id=tenant.id,
        key_prefix="sk-abc",
        response={"id": response_id, "model": "tiny", "status": "completed", "output": []},
        input_items=[{"id": "msg_1", "type": "message", "role": "user", "content": []}],
    )


def test_only_the_owning_tenant_gets_or_deletes_it(make_tenant):
    alice, bob = make_tenant("Alice"), make_tenant("Bob")
    _store(alice)
    assert response_get(tenant_id=alice.id, response_id="resp_1").model == "tiny"
    for call in (response_get, response_delete):
        with pytest.raises(ApiError) as got:
            call(tenant_id=bob.id, response_id="resp_1")
        assert got.value.status == 404 and got.value.code == "response_not_found"
    response_delete(tenant_id=alice.id, response_id="resp_1")
    assert not StoredResponse.objects.exists()
    with pytest.raises(ApiError):
        response_delete(tenant_id=alice.id, response_id="resp_1")


def test_the_admin_lists_them_and_changes_nothing(client, make_tenant):
    stored = _store(make_tenant("Carol"), "resp_admin")
    client.force_login(User.objects.create_superuser("root", "r@x.test", "pw-12345678"))
    listing = client.get("/admin/responses/storedresponse/")
    assert listing.status_code == 200 and b"resp_admin" in listing.content
    assert client.get("/admin/responses/storedresponse/add/").status_code == 403
    detail = client.get(f"/admin/responses/storedresponse/{stored.pk}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    deleted = client.post(f"/admin/responses/storedresponse/{stored.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 403 and StoredResponse.objects.filter(pk=stored.pk).exists()
