"""OpenAI's cursor-paged lists over a tenant's rows: ``after`` an id of the previous page,
``limit`` rows a page, oldest or newest first; the page object around them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet

from controlplane.common.api_error import ApiError

MAX_PAGE = 100


def cursor_page(queryset: QuerySet, *, after: str | None, limit: int, ascending: bool) -> list:
    """The rows of one page, by ``created_at`` then primary key. One more than ``limit`` is
    read, to tell whether there is a next page."""
    if not 1 <= limit <= MAX_PAGE:
        raise ApiError(f"limit must be between 1 and {MAX_PAGE}.", param="limit")
    order = ("created_at", "pk") if ascending else ("-created_at", "-pk")
    queryset = queryset.order_by(*order)
    if after:
        anchor = queryset.filter(pk=after).values_list("created_at", flat=True).first()
        if anchor is None:
            raise ApiError(f"No such object for `after`: '{after}'", param="after")
        if ascending:
            queryset = queryset.filter(created_at__gte=anchor).exclude(
                created_at=anchor, pk__lte=after
            )
        else:
            queryset = queryset.filter(created_at__lte=anchor).exclude(
                created_at=anchor, pk__gte=after
            )
    return list(queryset[: limit + 1])


def page_object(objects: list, *, limit: int, render: Callable[[Any], dict]) -> dict:
    """OpenAI's page object; ``objects`` may hold one more than ``limit`` (there is more)."""
    data = [render(o) for o in objects[:limit]]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(objects) > limit,
    }
