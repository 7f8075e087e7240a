"""Query parameters of OpenAI's cursor-paged lists (``after``, ``limit``, ``order``), and of
Anthropic's (``after_id``, ``before_id``, ``limit``)."""

from __future__ import annotations

from typing import Any

from controlplane.common.cursor_pages import MAX_PAGE, page_object
from inference.errors import invalid_request


def page_params(
    query, *, default_limit: int, default_order: str = "desc"
) -> tuple[str | None, int, bool]:
    """(after, limit, ascending) from a request's query string; a 400 for a bad value."""
    try:
        limit = int(query.get("limit", default_limit))
    except ValueError:
        raise invalid_request("limit must be an integer.", param="limit") from None
    order = query.get("order", default_order)
    if order not in ("asc", "desc"):
        raise invalid_request("order must be `asc` or `desc`.", param="order")
    return query.get("after") or None, limit, order == "asc"


def item_page(
    items: list[dict], *, after: str | None, limit: int, ascending: bool
) -> dict[str, Any]:
    """OpenAI's page object over ``items`` (oldest first, each with an ``id``), for lists kept
    whole in one row: a stored response's input items, a stored completion's messages."""
    if not 1 <= limit <= MAX_PAGE:
        raise invalid_request(f"limit must be between 1 and {MAX_PAGE}.", param="limit")
    if not ascending:
        items = items[::-1]
    if after:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return page_object(items, limit=limit, render=dict)


ANTHROPIC_MAX_PAGE = 1000


def anthropic_limit(query) -> int:
    """Anthropic's ``limit``: 1 to 1,000, default 20; a 400 for anything else."""
    try:
        limit = int(query.get("limit", 20))
    except ValueError:
        limit = 0
    if not 1 <= limit <= ANTHROPIC_MAX_PAGE:
        raise invalid_request(f"limit must be from 1 to {ANTHROPIC_MAX_PAGE}.", param="limit")
    return limit


def anthropic_page(data: list[dict], *, has_more: bool) -> dict[str, Any]:
    """Anthropic's page object around ``data`` (each with an ``id``)."""
    return {
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
