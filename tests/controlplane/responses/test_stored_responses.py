"""Stored responses: reachable only through the tenant that made them; read-only in the admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from controlplane.common.api_error import ApiError
from controlplane.responses.background import (
    STALE_AFTER_S,
    background_beat,
    background_cancel,
    background_get,
    background_start,
)
from controlplane.responses.models import StoredResponse
from controlplane.responses.services import (
    background_finish,
    response_delete,
    response_get,
    response_store,
)

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


def _background(tenant, response_id="resp_bg"):
    response = {"id": response_id, "model": "tiny", "status": "queued", "background": True}
    return background_start(
        tenant_id=tenant.id, key_prefix="sk-abc", response=response, input_items=[]
    )


def test_a_background_response_whose_process_stopped_is_failed_when_read(make_tenant):
    tenant = make_tenant()
    _background(tenant)
    assert background_beat("resp_bg") == "in_progress"
    assert background_get(tenant_id=tenant.id, response_id="resp_bg").status == "in_progress"
    long_ago = timezone.now() - timedelta(seconds=STALE_AFTER_S + 1)
    StoredResponse.objects.filter(pk="resp_bg").update(heartbeat_at=long_ago)
    failed = background_get(tenant_id=tenant.id, response_id="resp_bg")
    assert failed.status == "failed" and failed.response["status"] == "failed"
    assert "stopped before it finished" in failed.response["error"]["message"]


def test_only_a_running_background_response_can_be_cancelled(make_tenant):
    tenant = make_tenant()
    _store(tenant, "resp_fg")
    with pytest.raises(ApiError, match="background: true"):
        background_cancel(tenant_id=tenant.id, response_id="resp_fg")
    _background(tenant, "resp_bg")
    cancelled = background_cancel(tenant_id=tenant.id, response_id="resp_bg")
    assert cancelled.status == "cancelled" and cancelled.response["status"] == "cancelled"
    # The runner's end, arriving after the cancel, does not overwrite it; nor does a beat.
    assert not background_finish("resp_bg", {"status": "completed", "id": "resp_bg"})
    assert background_beat("resp_bg") == "cancelled"
    _background(tenant, "resp_done")
    assert background_finish("resp_done", {"id": "resp_done", "status": "completed"})
    with pytest.raises(ApiError, match="already finished"):
        background_cancel(tenant_id=tenant.id, response_id="resp_done")
    with pytest.raises(ApiError) as other:
        background_cancel(tenant_id=make_tenant().id, response_id="resp_bg")
    assert other.value.status == 404


def test_a_cancel_racing_a_delete_is_a_404_not_a_server_error(make_tenant, monkeypatch):
    from controlplane.responses import background

    tenant = make_tenant()
    _background(tenant, "resp_bg")
    reads = []

    def read_while_a_delete_lands(**kwargs):
        reads.append(kwargs)
        if len(reads) == 2:  # after the cancel's update, a DELETE from another request
            response_delete(**kwargs)
        return response_get(**kwargs)

    monkeypatch.setattr(background, "response_get", read_while_a_delete_lands)
    with pytest.raises(ApiError) as gone:
        background_cancel(tenant_id=tenant.id, response_id="resp_bg")
    assert gone.value.status == 404 and len(reads) == 2
