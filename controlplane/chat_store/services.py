"""Stored chat completions, always through the owning tenant: another tenant's id, a deleted
one and one never stored are the same 404."""

from __future__ import annotations

from typing import Any

from django.db.models import TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from controlplane.chat_store.models import StoredChatCompletion
from controlplane.common.api_error import ApiError, object_not_found
from controlplane.common.cursor_pages import cursor_page


def completion_not_found(completion_id: str) -> ApiError:
    return object_not_found("chat completion", completion_id, param="completion_id")


def stored_messages(completion_id: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages as the messages endpoint lists them: each with an id, and a
    list of content parts kept whole in ``content_parts`` beside its text in ``content``."""
    stored = []
    for index, message in enumerate(messages):
        entry = {"id": f"{completion_id}-{index}", **message}
        content = message.get("content")
        if isinstance(content, list):
            entry["content"] = "".join(part.get("text", "") for part in content)
            entry["content_parts"] = content
        else:
            entry.setdefault("content_parts", None)
        stored.append(entry)
    return stored


def completion_store(
    *,
    tenant_id: int,
    key_prefix: str,
    completion: dict[str, Any],
    messages: list[dict[str, Any]],
    metadata: dict[str, str],
) -> StoredChatCompletion:
    return StoredChatCompletion.objects.create(
        id=completion["id"],
        tenant_id=tenant_id,
        key_prefix=key_prefix[:32],
        model=completion["model"][:200],
        metadata=metadata,
        messages=stored_messages(completion["id"], messages),
        completion=completion,
    )


def completion_get(*, tenant_id: int, completion_id: str) -> StoredChatCompletion:
    found = StoredChatCompletion.objects.filter(tenant_id=tenant_id, id=completion_id).first()
    if found is None:
        raise completion_not_found(completion_id)
    return found


def completion_list(
    *,
    tenant_id: int,
    model: str | None,
    metadata: dict[str, str],
    after: str | None,
    limit: int,
    ascending: bool,
) -> list[StoredChatCompletion]:
    """One page of the tenant's stored completions, of ``model`` if given, whose metadata
    holds every pair of ``metadata``."""
    queryset = StoredChatCompletion.objects.filter(tenant_id=tenant_id)
    if model:
        queryset = queryset.filter(model=model)
    for number, (key, value) in enumerate(metadata.items()):
        # The key as one JSON key whatever it holds ("__" too), never a lookup path; its
        # value compared as text (a bare key transform would compare JSON).
        alias = f"metadata_{number}"
        value_text = Cast(KeyTextTransform(key, "metadata"), TextField())
        queryset = queryset.alias(**{alias: value_text})
        queryset = queryset.filter(**{alias: value})
    return cursor_page(queryset, after=after, limit=limit, ascending=ascending)


def completion_update(
    *, tenant_id: int, completion_id: str, metadata: dict[str, str]
) -> StoredChatCompletion:
    """Replace a stored completion's metadata (OpenAI's one modification)."""
    found = completion_get(tenant_id=tenant_id, completion_id=completion_id)
    # An UPDATE by id rather than save(): a DELETE landing in between is a 404, not a 500.
    if not StoredChatCompletion.objects.filter(pk=found.pk).update(metadata=metadata):
        raise completion_not_found(completion_id)
    found.metadata = metadata
    return found


def completion_delete(*, tenant_id: int, completion_id: str) -> None:
    deleted, _ = StoredChatCompletion.objects.filter(tenant_id=tenant_id, id=completion_id).delete()
    if not deleted:
        raise completion_not_found(completion_id)


def completion_object(stored: StoredChatCompletion) -> dict[str, Any]:
    """The stored ``chat.completion`` as the endpoints answer it, with its metadata."""
    return {**stored.completion, "metadata": stored.metadata}
