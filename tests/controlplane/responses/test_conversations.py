"""Conversations in the database: only the owning tenant reaches them; items keep their
order through appends and deletions; appends from many threads each land whole."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from controlplane.common.api_error import ApiError
from controlplane.responses.conversations import (
    conversation_create,
    conversation_delete,
    conversation_get,
    item_delete,
    item_get,
    items_add,
    items_history,
    items_page,
)
from controlplane.responses.models import ConversationItem


def _message(text: str) -> dict:
    return {"id": f"msg_{text}", "type": "message", "role": "user", "content": [text]}


def _texts(items) -> list[str]:
    return [item["content"][0] for item in items]


@pytest.mark.django_db
def test_another_tenant_reaches_nothing(make_tenant):
    alice, bob = make_tenant("Alice"), make_tenant("Bob")
    made = conversation_create(
        tenant_id=alice.id, key_prefix="sk-a", metadata={}, items=[_message("a")]
    )
    for call, extra in (
        (conversation_get, {}),
        (conversation_delete, {}),
        (items_history, {}),
        (items_add, {"items": [_message("b")]}),
        (item_get, {"item_id": "msg_a"}),
        (item_delete, {"item_id": "msg_a"}),
    ):
        with pytest.raises(ApiError) as got:
            call(tenant_id=bob.id, conversation_id=made.id, **extra)
        assert got.value.status == 404
    assert _texts(items_history(tenant_id=alice.id, conversation_id=made.id)) == ["a"]


@pytest.mark.django_db
def test_items_keep_their_order_through_appends_deletions_and_pages(make_tenant):
    tenant = make_tenant()
    made = conversation_create(
        tenant_id=tenant.id, key_prefix="", metadata={}, items=[_message("a"), _message("b")]
    )
    ids = {"tenant_id": tenant.id, "conversation_id": made.id}
    items_add(**ids, items=[_message("c")])
    item_delete(**ids, item_id="msg_c")  # the last one: its position is used again
    items_add(**ids, items=[_message("d"), _message("e")])
    assert _texts(items_history(**ids)) == ["a", "b", "d", "e"]
    page = {"after": None, "limit": 2}
    assert _texts(items_page(**ids, **page, ascending=True)) == ["a", "b", "d"]
    assert _texts(items_page(**ids, after="msg_b", limit=2, ascending=True)) == ["d", "e"]
    assert _texts(items_page(**ids, after="msg_d", limit=5, ascending=False)) == ["b", "a"]
    with pytest.raises(ApiError) as got:
        items_page(**ids, after="msg_nope", limit=2, ascending=True)
    assert got.value.param == "after"
    conversation_delete(**ids)
    assert not ConversationItem.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_appends_from_many_threads_each_land_whole(make_tenant):
    """Row locks at work: bin/test runs the database tests on PostgreSQL too. SQLite's
    in-memory test database refuses a second writer outright ("table is locked"); a served
    SQLite file queues writers instead (IMMEDIATE transactions, a 20 s wait)."""
    if connection.vendor != "postgresql":
        pytest.skip("needs concurrent writers: runs in bin/test's PostgreSQL pass")
    tenant = make_tenant()
    made = conversation_create(tenant_id=tenant.id, key_prefix="", metadata={}, items=[])
    ids = {"tenant_id": tenant.id, "conversation_id": made.id}
    errors = []

    def turn(number: int) -> None:
        try:
            items_add(**ids, items=[_message(f"{number}-in"), _message(f"{number}-out")])
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=turn, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    texts = _texts(items_history(**ids))
    assert len(texts) == 12
    # Each turn's two items next to each other, in order.
    assert all(
        texts[i].endswith("-in") and texts[i + 1] == texts[i][:-3] + "-out" for i in range(0, 12, 2)
    )


@pytest.mark.django_db
def test_a_metadata_update_racing_a_delete_is_a_404_not_a_server_error(make_tenant, monkeypatch):
    from controlplane.responses import conversations

    tenant = make_tenant()
    made = conversation_create(tenant_id=tenant.id, key_prefix="sk-abc", items=[], metadata={})

    def read_then_a_delete_lands(**kwargs):
        found = conversation_get(**kwargs)
        conversation_delete(**kwargs)  # another request's DELETE, before the update writes
        return found

    monkeypatch.setattr(conversations, "conversation_get", read_then_a_delete_lands)
    with pytest.raises(ApiError) as gone:
        conversations.conversation_update(
            tenant_id=tenant.id, conversation_id=made.id, metadata={"a": "b"}
        )
    assert gone.value.status == 404
