"""This month's spend beside the budget, on the tenant and key admin pages.

Spend is priced and summed by the usage app, a room above this one (docs/architecture.md), so
it registers the two renderers when it loads (``UsageConfig.ready``) instead of this app
importing it; without them (the usage app not installed) the columns read "-".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_renderers: dict[str, Callable[..., Any]] = {}


def register(*, tenant: Callable[..., Any], key: Callable[..., Any]) -> None:
    _renderers.update(tenant=tenant, key=key)


def tenant_spend_used(tenant, *, compact: bool = False):
    render = _renderers.get("tenant")
    return render(tenant, compact=compact) if render else "-"


def key_spend_used(key, *, compact: bool = False):
    render = _renderers.get("key")
    return render(key, compact=compact) if render else "-"
