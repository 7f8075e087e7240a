"""Conversations and their items, always through the owning tenant: another tenant's id, a
deleted one and one never made are the same 404."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from controlplane.common.api_error import ApiError, object_not_found
from controlplane.common.cursor_pages import MAX_PAGE
from controlplane.responses.models import Conversation, ConversationItem

APPEND_ATTEMPTS = 5


def conversation_not_found(conversation_id: str) -> ApiError:
    return object_not_found("conversation", conversation_id, param="conversation_id")


def conversation_object(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation.id,
        "object": "conversation",
        "created_at": int(conversation.created_at.timestamp()),
        "metadata": conversation.metadata,
    }


def conversation_create(
    *, tenant_id: int, key_prefix: str, metadata: dict[str, str], items: list[dict[str, Any]]
) -> Conversation:
    with transaction.atomic():
        conversation = Conversation.objects.create(
            id=f"conv_{uuid.uuid4().hex}",
            tenant_id=tenant_id,
            key_prefix=key_prefix[:32],
            metadata=metadata,
        )
        _append(conversation, items, start=0)
    return conversation


def conversation_get(*, tenant_id: int, conversation_id: str) -> Conversation:
    found = Conversation.objects.filter(tenant_id=tenant_id, id=conversation_id).first()
    if found is None:
        raise conversation_not_found(conversation_id)
    return found


def conversation_update(
    *, tenant_id: int, conversation_id: str, metadata: dict[str, str]
) -> Conversation:
    found = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    # An UPDATE by id rather than save(): a DELETE landing in between is a 404, not a 500.
    if not Conversation.objects.filter(pk=found.pk).update(metadata=metadata):
        raise conversation_not_found(conversation_id)
    found.metadata = metadata
    return found


def conversation_delete(*, tenant_id: int, conversation_id: str) -> None:
    deleted, _ = Conversation.objects.filter(tenant_id=tenant_id, id=conversation_id).delete()
    if not deleted:
        raise conversation_not_found(conversation_id)


def _append(conversation: Conversation, items: list[dict[str, Any]], *, start: int) -> None:
    ConversationItem.objects.bulk_create(
        ConversationItem(
            conversation=conversation, position=start + offset, item_id=item["id"], item=item
        )
        for offset, item in enumerate(items)
    )


def items_add(
    *, tenant_id: int, conversation_id: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Append ``items`` (validated, with ids) after the conversation's last item. The
    conversation's row is locked meanwhile, so two responses finishing together on one
    conversation each append whole, one after the other. SQLite has no row locks: there the
    unique position makes the later writer fail, and it tries again after the other."""
    for attempt in range(APPEND_ATTEMPTS):
        try:
            with transaction.atomic():
                found = (
                    Conversation.objects.select_for_update()
                    .filter(tenant_id=tenant_id, id=conversation_id)
                    .first()
                )
                if found is None:
                    raise conversation_not_found(conversation_id)
                last = found.items.aggregate(last=Max("position"))["last"]
                _append(found, items, start=0 if last is None else last + 1)
            return items
        except IntegrityError:
            if attempt == APPEND_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def items_history(*, tenant_id: int, conversation_id: str) -> list[dict[str, Any]]:
    """Every item of the conversation, in order: what a response in it continues."""
    found = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    return list(found.items.order_by("position").values_list("item", flat=True))


def items_page(
    *, tenant_id: int, conversation_id: str, after: str | None, limit: int, ascending: bool
) -> list[dict[str, Any]]:
    """One page of items, oldest or newest first; one more than ``limit`` when there is a
    next page."""
    if not 1 <= limit <= MAX_PAGE:
        raise ApiError(f"limit must be between 1 and {MAX_PAGE}.", param="limit")
    found = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    rows = found.items.order_by("position" if ascending else "-position")
    if after:
        anchor = rows.filter(item_id=after).values_list("position", flat=True).first()
        if anchor is None:
            raise ApiError(f"No item '{after}' in this conversation for `after`.", param="after")
        rows = rows.filter(**{"position__gt" if ascending else "position__lt": anchor})
    return list(rows.values_list("item", flat=True)[: limit + 1])


def item_get(*, tenant_id: int, conversation_id: str, item_id: str) -> dict[str, Any]:
    found = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    item = found.items.filter(item_id=item_id).values_list("item", flat=True).first()
    if item is None:
        raise _item_not_found(item_id)
    return item


def item_delete(*, tenant_id: int, conversation_id: str, item_id: str) -> Conversation:
    found = conversation_get(tenant_id=tenant_id, conversation_id=conversation_id)
    deleted, _ = found.items.filter(item_id=item_id).delete()
    if not deleted:
        raise _item_not_found(item_id)
    return found


def _item_not_found(item_id: str) -> ApiError:
    return object_not_found("conversation item", item_id, param="item_id")
