"""OpenAI's cursor-paged lists in the schema: the page object around a list's items, and the
``after`` and ``limit`` query parameters (read by inference/views/list_params.py)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

PAGE_PARAMETERS = [
    OpenApiParameter("after", str, description="List after this id (a cursor)."),
    OpenApiParameter("limit", int, description="At most this many (1 to 100)."),
]


def page_of(item: type[serializers.Serializer], name: str) -> serializers.Serializer:
    """The page object (``object: list``, ``data``, cursors, ``has_more``) holding ``item``s,
    as the component ``name``."""
    return inline_serializer(
        name,
        fields={
            "object": serializers.ChoiceField(choices=["list"]),
            "data": item(many=True),
            "first_id": serializers.CharField(required=False, allow_null=True),
            "last_id": serializers.CharField(required=False, allow_null=True),
            "has_more": serializers.BooleanField(),
        },
    )
