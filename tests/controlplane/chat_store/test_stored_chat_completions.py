"""Stored chat completions in the database: only the owning tenant reaches them; the list
filters by model and metadata and pages by cursor; retention deletes old ones; read-only in
the admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

from controlplane.chat_store.models import StoredChatCompletion
from controlplane.chat_store.retention import purge_expired
from controlplane.chat_store.services import (
    completion_delete,
    completion_get,
    completion_list,
    completion_object,
    completion_store,
    completion_update,
)
from controlplane.common.api_error import ApiError
from controlplane.responses.models import StoredResponse

pytestmark = pytest.mark.django_db


def _store(tenant, completion_id, *, model="tiny", metadata=None, messages=None):
    return completion_store(
        tenant_id=tenant.id,
        key_prefix="sk-abc",
        completion={"id": completion_id, "object": "chat.completion", "model": model},
        messages=messages or [{"role": "user", "content": "Hi"}],
        metadata=metadata or {},
    )


def _ids(tenant, **overrides) -> list[str]:
    options = {"model": None, "metadata": {}, "after": None, "limit": 20, "ascending": True}
    rows = completion_list(tenant_id=tenant.id, **{**options, **overrides})
    return [row.id for row in rows]


def test_only_the_owning_tenant_reaches_it(make_tenant):
    alice, bob = make_tenant("Alice"), make_tenant("Bob")
    _store(alice, "chatcmpl-1", metadata={"run": "a"})
    assert completion_object(completion_get(tenant_id=alice.id, completion_id="chatcmpl-1")) == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "tiny",
        "metadata": {"run": "a"},
    }
    assert _ids(bob) == []
    for call, extra in (
        (completion_get, {}),
        (completion_delete, {}),
        (completion_update, {"metadata": {}}),
    ):
        with pytest.raises(ApiError) as got:
            call(tenant_id=bob.id, completion_id="chatcmpl-1", **extra)
        assert got.value.status == 404 and got.value.code == "not_found"
    assert completion_get(tenant_id=alice.id, completion_id="chatcmpl-1").metadata == {"run": "a"}
    completion_delete(tenant_id=alice.id, completion_id="chatcmpl-1")
    assert not StoredChatCompletion.objects.exists()


def test_the_list_filters_by_model_and_every_metadata_pair(make_tenant):
    tenant = make_tenant()
    _store(tenant, "c1", model="tiny", metadata={"team": "a", "odd__key": "x"})
    _store(tenant, "c2", model="tiny", metadata={"team": "b"})
    _store(tenant, "c3", model="other", metadata={"team": "a"})
    assert _ids(tenant) == ["c1", "c2", "c3"]
    assert _ids(tenant, model="tiny") == ["c1", "c2"]
    assert _ids(tenant, metadata={"team": "a"}) == ["c1", "c3"]
    assert _ids(tenant, metadata={"team": "a", "odd__key": "x"}) == ["c1"]
    assert _ids(tenant, model="other", metadata={"team": "b"}) == []
    assert _ids(tenant, metadata={"missing": ""}) == []


def test_the_list_pages_by_cursor_either_way(make_tenant):
    tenant = make_tenant()
    for number in range(5):
        _store(tenant, f"c{number}")
    first = _ids(tenant, limit=2)
    assert first == ["c0", "c1", "c2"]  # one more than the page: there is a next one
    assert _ids(tenant, limit=2, after="c1") == ["c2", "c3", "c4"]
    assert _ids(tenant, limit=2, after="c3") == ["c4"]
    assert _ids(tenant, limit=2, ascending=False) == ["c4", "c3", "c2"]
    assert _ids(tenant, limit=2, ascending=False, after="c3") == ["c2", "c1", "c0"]
    with pytest.raises(ApiError) as got:
        _ids(tenant, limit=101)
    assert got.value.param == "limit"


def test_update_replaces_the_metadata_only(make_tenant):
    tenant = make_tenant()
    _store(tenant, "c1", metadata={"a": "1", "b": "2"})
    updated = completion_update(tenant_id=tenant.id, completion_id="c1", metadata={"c": "3"})
    assert completion_object(updated)["metadata"] == {"c": "3"}
    assert StoredChatCompletion.objects.get(pk="c1").completion["model"] == "tiny"


def test_messages_get_ids_and_content_parts_stay_whole(make_tenant):
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
    stored = _store(
        make_tenant(),
        "chatcmpl-9",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}],
    )
    assert stored.messages == [
        {"id": "chatcmpl-9-0", "role": "system", "content": "Be brief.", "content_parts": None},
        {"id": "chatcmpl-9-1", "role": "user", "content": "Hello there", "content_parts": parts},
    ]


def test_retention_deletes_stored_objects_past_their_days(make_tenant):
    tenant = make_tenant()
    old, recent = _store(tenant, "c-old"), _store(tenant, "c-new")
    response = StoredResponse.objects.create(id="resp_old", tenant=tenant, model="tiny")
    long_ago = timezone.now() - timedelta(days=31)
    StoredChatCompletion.objects.filter(pk=old.pk).update(created_at=long_ago)
    StoredResponse.objects.filter(pk=response.pk).update(created_at=long_ago)
    with override_settings(STORED_OBJECT_RETENTION_DAYS=0):
        assert purge_expired() == 0  # 0: kept until a client deletes them
    with override_settings(STORED_OBJECT_RETENTION_DAYS=30):
        assert purge_expired() == 2
    assert list(StoredChatCompletion.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not StoredResponse.objects.exists()


def test_the_admin_lists_them_and_changes_nothing(client, make_tenant):
    stored = _store(make_tenant("Carol"), "chatcmpl-admin")
    client.force_login(User.objects.create_superuser("root", "r@x.test", "pw-12345678"))
    listing = client.get("/admin/chat_store/storedchatcompletion/")
    assert listing.status_code == 200 and b"chatcmpl-admin" in listing.content
    assert client.get("/admin/chat_store/storedchatcompletion/add/").status_code == 403
    detail = client.get(f"/admin/chat_store/storedchatcompletion/{stored.pk}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content


def test_a_metadata_update_racing_a_delete_is_a_404_not_a_server_error(make_tenant, monkeypatch):
    from controlplane.chat_store import services

    tenant = make_tenant()
    _store(tenant, "chatcmpl-1")

    def read_then_a_delete_lands(**kwargs):
        found = completion_get(**kwargs)
        completion_delete(**kwargs)  # another request's DELETE, before the update writes
        return found

    monkeypatch.setattr(services, "completion_get", read_then_a_delete_lands)
    with pytest.raises(ApiError) as gone:
        completion_update(tenant_id=tenant.id, completion_id="chatcmpl-1", metadata={"a": "b"})
    assert gone.value.status == 404
