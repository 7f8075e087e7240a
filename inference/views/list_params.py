"""Query parameters of OpenAI's cursor-paged lists (``after``, ``limit``, ``order``)."""

from __future__ import annotations

from inference.errors import invalid_request


def page_params(query, *, default_limit: int) -> tuple[str | None, int, bool]:
    """(after, limit, ascending) from a request's query string; a 400 for a bad value."""
    try:
        limit = int(query.get("limit", default_limit))
    except ValueError:
        raise invalid_request("limit must be an integer.", param="limit") from None
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request("order must be `asc` or `desc`.", param="order")
    return query.get("after") or None, limit, order == "asc"
