"""/v1/end_users: the tenant's own API for the budgets and blocks of its end users (what the
portal's End users page sets), for an application that acts on abuse or on its customers'
plans by itself. The key must list the ``end_users`` scope: a key without scopes, which may
call every OpenAI endpoint, may not change what the tenant's end users may spend.

An end user is named as the requests name them (``safety_identifier`` or ``user``), in the
path, URL-encoded; ``id`` is that name. Listing gives the end users with controls, by name.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from controlplane.access.principals import AccessError
from controlplane.billing.money import amount_text, currency
from controlplane.common.api_error import object_not_found
from controlplane.common.cursor_pages import MAX_PAGE, page_object
from controlplane.end_users import selectors
from controlplane.end_users.models import MAX_NAME_LENGTH
from controlplane.end_users.selectors import EndUserState
from controlplane.end_users.services import end_user_remove_controls, end_user_set_controls
from controlplane.tenants.models import END_USERS_SCOPE
from controlplane.tenants.selectors import tenant_get_by_pk
from inference.errors import invalid_request
from inference.schemas.end_users import EndUserControlsSerializer
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import page_params

END_USER = OpenApiResponse(description='{"object": "end_user", "id": NAME, ...}')
_DEFAULT_LIMIT = 20


def _amount(value) -> str | None:
    return None if value is None else str(value)


def end_user_object(state: EndUserState) -> dict[str, Any]:
    controls, spend = state.controls, state.spend
    return {
        "object": "end_user",
        "id": state.name,
        "blocked": bool(controls and controls.blocked),
        "monthly_spend_budget": _amount(controls.monthly_spend_budget if controls else None),
        "effective_monthly_spend_budget": _amount(state.budget),
        "currency": currency(),
        "spent_this_month": amount_text(spend.cost_units) if spend else "0",
        "requests_this_month": spend.num_requests if spend else 0,
        "tokens_this_month": spend.total_tokens if spend else 0,
        "updated_at": int(controls.updated_at.timestamp()) if controls else None,
    }


def _checked_name(name: str) -> str:
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise invalid_request(
            f"An end user's name has 1 to {MAX_NAME_LENGTH} characters.", param="end_user"
        )
    return name


class EndUserRoute(AsyncApiView):
    endpoint = END_USERS_SCOPE

    async def authenticate(self):
        principal = await super().authenticate()
        if END_USERS_SCOPE not in principal.scopes:
            raise AccessError(
                "This API key may not manage end users: it needs the end_users scope (create "
                "such a key on the portal's API keys page).",
                status=403,
                type="invalid_request_error",
                code="insufficient_scope",
            )
        return principal


class EndUserListView(EndUserRoute):
    """The tenant's end users with a budget or a block, by name."""

    @extend_schema(
        operation_id="listEndUsers",
        parameters=[
            OpenApiParameter("order", str, enum=["asc", "desc"], description="default asc"),
            OpenApiParameter("after", str, description="an end user's id: list those after it"),
            OpenApiParameter("limit", int, description="1 to 100, default 20"),
        ],
        responses={200: OpenApiResponse(description="A page of end_user objects.")},
        tags=["End users"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        after, limit, ascending = page_params(
            request.GET, default_limit=_DEFAULT_LIMIT, default_order="asc"
        )
        if not 1 <= limit <= MAX_PAGE:
            raise invalid_request(f"limit must be between 1 and {MAX_PAGE}.", param="limit")

        def page() -> list[EndUserState]:
            tenant = tenant_get_by_pk(pk=principal.tenant_id)
            return selectors.end_user_states(
                tenant=tenant, after=after, limit=limit, ascending=ascending
            )

        states = await sync_to_async(page)()
        return json_response(page_object(states, limit=limit, render=end_user_object))


class EndUserDetailView(EndUserRoute):
    """One end user: read, set their budget or block, or remove both."""

    @extend_schema(operation_id="getEndUser", responses={200: END_USER}, tags=["End users"])
    async def get(self, request, name: str):
        principal = await self.authenticate()
        name = _checked_name(name)

        def read() -> EndUserState:
            tenant = tenant_get_by_pk(pk=principal.tenant_id)
            return selectors.end_user_state(tenant=tenant, name=name)

        return json_response(end_user_object(await sync_to_async(read)()))

    @extend_schema(
        operation_id="setEndUser",
        request=EndUserControlsSerializer,
        responses={200: END_USER},
        tags=["End users"],
    )
    async def post(self, request, name: str):
        principal = await self.authenticate()
        name = _checked_name(name)
        body = validate_body(EndUserControlsSerializer, self.json_body())

        def write() -> EndUserState:
            tenant = tenant_get_by_pk(pk=principal.tenant_id)
            now = selectors.end_user_state(tenant=tenant, name=name).controls
            end_user_set_controls(
                tenant=tenant,
                name=name,
                monthly_spend_budget=body.get(
                    "monthly_spend_budget", now.monthly_spend_budget if now else None
                ),
                blocked=body.get("blocked", now.blocked if now else False),
                note=now.note if now else "",
                actor_label=f"API key {principal.key_prefix}…",
            )
            return selectors.end_user_state(tenant=tenant, name=name)

        return json_response(end_user_object(await sync_to_async(write)()))

    @extend_schema(operation_id="deleteEndUser", responses={200: END_USER}, tags=["End users"])
    async def delete(self, request, name: str):
        principal = await self.authenticate()
        name = _checked_name(name)

        def remove() -> None:
            tenant = tenant_get_by_pk(pk=principal.tenant_id)
            controls = selectors.end_user_state(tenant=tenant, name=name).controls
            if controls is None:
                raise object_not_found("end user with a budget or block", name, param="end_user")
            end_user_remove_controls(
                end_user=controls, actor_label=f"API key {principal.key_prefix}…"
            )

        await sync_to_async(remove)()
        return json_response({"object": "end_user.deleted", "id": name, "deleted": True})
