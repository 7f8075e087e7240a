"""Reads on LoRA adapters: what a tenant may call, and where a call to an adapter goes."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, QuerySet

from controlplane.adapters.models import Adapter
from controlplane.tenants.models import Tenant


@dataclass(frozen=True, slots=True)
class AdapterRoute:
    """Everything the API needs to send a request to an adapter, detached from the ORM.

    ``base_model`` names the served model whose engines run it (its request stream); ``name``,
    ``checksum`` and ``path`` become the request's ``AdapterRef``.
    """

    name: str
    base_model: str
    checksum: str
    path: str
    created: int  # Unix time, for /v1/models


def _route(adapter: Adapter) -> AdapterRoute:
    return AdapterRoute(
        name=adapter.name,
        base_model=adapter.base_model.name,
        checksum=adapter.checksum,
        path=adapter.path,
        created=int(adapter.created_at.timestamp()),
    )


def adapter_list(*, base_model: str | None = None, state: str | None = None) -> QuerySet[Adapter]:
    qs = Adapter.objects.select_related("base_model")
    if base_model is not None:
        qs = qs.filter(base_model__name=base_model)
    if state is not None:
        qs = qs.filter(state=state)
    return qs


def adapter_get(*, name: str) -> Adapter | None:
    return Adapter.objects.select_related("base_model").filter(name=name).first()


def _servable() -> QuerySet[Adapter]:
    """Adapters a request may name: ready, on a base model that is served."""
    return Adapter.objects.filter(state=Adapter.State.READY, base_model__is_active=True)


def _staff_playground_tenant_ids() -> frozenset[int]:
    """The tenants staff users' playgrounds run under: they may try every servable adapter,
    granted or not, so an operator can check an adapter before granting it to anyone."""
    rows = Tenant.objects.filter(playground_user__is_staff=True, playground_user__is_active=True)
    return frozenset(rows.values_list("id", flat=True))


def _visible(tenant_id: int) -> QuerySet[Adapter]:
    adapters = _servable().select_related("base_model")
    if tenant_id in _staff_playground_tenant_ids():
        return adapters
    return adapters.filter(tenants__id=tenant_id)


def adapters_visible_to(*, tenant_id: int) -> list[AdapterRoute]:
    """Ready adapters granted to the tenant whose base model is served, ordered by name."""
    return [_route(a) for a in _visible(tenant_id).order_by("name")]


def adapter_route_for(*, tenant_id: int, name: str) -> AdapterRoute | None:
    """Where a call with ``model=name`` goes for this tenant; None means 404 (unknown or
    not granted, deliberately indistinguishable so names of other tenants' adapters leak not)."""
    adapter = _visible(tenant_id).filter(name=name).first()
    return None if adapter is None else _route(adapter)


def adapter_routes_granted() -> dict[AdapterRoute, frozenset[int]]:
    """Every servable adapter with the ids of the tenants that may call it (those granted it,
    and the staff playgrounds' tenants), ordered by name: what the API processes cache
    (controlplane.catalog.cache), in two queries."""
    rows = (
        _servable()
        .select_related("base_model")
        .annotate(grantee=F("tenants__id"))  # one row per (adapter, tenant), or one with None
        .order_by("name")
    )
    staff = _staff_playground_tenant_ids()
    granted: dict[AdapterRoute, set[int]] = {}
    for adapter in rows:
        tenants = granted.setdefault(_route(adapter), set(staff))
        if adapter.grantee is not None:
            tenants.add(adapter.grantee)
    return {route: frozenset(tenants) for route, tenants in granted.items() if tenants}


def tenant_adapter_names(*, tenant_id: int) -> frozenset[str]:
    """Names of the ready adapters granted to the tenant whose base model is served."""
    return frozenset(_visible(tenant_id).values_list("name", flat=True))


def adapter_registry_rows(*, base_model: str) -> list[tuple[str, str, str, str]]:
    """``(name, state, checksum, path)`` of every adapter of ``base_model``: what the engines'
    adapter registry is reconciled against (engine_sync.py)."""
    rows = Adapter.objects.filter(base_model__name=base_model)
    return list(rows.values_list("name", "state", "checksum", "path"))
