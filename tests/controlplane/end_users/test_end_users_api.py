"""/v1/end_users through the real API (Django's async client, a real Redis): a tenant's
application sets, reads, lists and removes its end users' budgets and blocks with a key that
lists the end_users scope, and a block it sets refuses that end user's next request."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from controlplane.audit.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def _call(async_client, key_and_secret):
    key, secret = key_and_secret

    async def call(method: str, path: str, body: dict | None = None):
        return await getattr(async_client, method)(
            path,
            **({"data": json.dumps(body), "content_type": "application/json"} if body else {}),
            headers={"Authorization": f"Bearer {secret}"},
        )

    call.prefix = key.prefix
    return call


@pytest.fixture
async def app(make_tenant, make_key, async_client):
    tenant = await sync_to_async(make_tenant)("Saas", end_user_monthly_spend_budget=Decimal("2.00"))
    manager = await sync_to_async(make_key)(tenant, scopes=["end_users"])
    serving = await sync_to_async(make_key)(tenant)  # no scopes: every OpenAI endpoint
    return tenant, _call(async_client, manager), _call(async_client, serving)


async def test_an_application_blocks_and_budgets_its_end_users(app):
    _, manage, serve = app
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    fresh = await manage("get", "/v1/end_users/a%2Fb")  # never seen: shown, not a 404
    assert fresh.json() == {
        **fresh.json(),
        "id": "a/b",
        "blocked": False,
        "monthly_spend_budget": None,
        "effective_monthly_spend_budget": "2.00",
        "spent_this_month": "0",
        "updated_at": None,
    }

    blocked = await manage("post", "/v1/end_users/a%2Fb", {"blocked": True})
    assert blocked.status_code == 200 and blocked.json()["blocked"] is True
    refused = await serve("post", "/v1/chat/completions", {**chat, "user": "a/b"})
    assert refused.json()["error"]["code"] == "end_user_blocked"

    # A field left out keeps its value.
    budgeted = await manage("post", "/v1/end_users/a%2Fb", {"monthly_spend_budget": 7.5})
    assert budgeted.json()["blocked"] is True
    assert budgeted.json()["monthly_spend_budget"] == "7.50"
    assert budgeted.json()["effective_monthly_spend_budget"] == "7.50"
    await manage("post", "/v1/end_users/zed", {"blocked": False, "monthly_spend_budget": "1"})

    listed = (await manage("get", "/v1/end_users?limit=1")).json()
    assert [u["id"] for u in listed["data"]] == ["a/b"] and listed["has_more"] is True
    rest = (await manage("get", f"/v1/end_users?after={listed['last_id']}")).json()
    assert [u["id"] for u in rest["data"]] == ["zed"] and rest["has_more"] is False

    gone = await manage("delete", "/v1/end_users/a%2Fb")
    assert gone.json() == {"object": "end_user.deleted", "id": "a/b", "deleted": True}
    assert (await manage("delete", "/v1/end_users/a%2Fb")).status_code == 404
    let_in = await serve("post", "/v1/chat/completions", {**chat, "user": "a/b"})
    assert let_in.status_code != 403
    labels = AuditEvent.objects.filter(action__startswith="end_user.").values_list(
        "actor_label", flat=True
    )
    assert [label async for label in labels] == [f"API key {manage.prefix}…"] * 4


async def test_only_keys_with_the_scope_manage_end_users_and_bad_input_is_named(app):
    _, manage, serve = app
    for method, path, body in (
        ("get", "/v1/end_users", None),
        ("post", "/v1/end_users/x", {"blocked": True}),
    ):
        response = await serve(method, path, body)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "insufficient_scope"
    for body, param in (
        ({"monthly_spend_budget": 0}, "monthly_spend_budget"),
        ({"monthly_spend_budget": "1.234"}, "monthly_spend_budget"),
        ({"blocked": "yes"}, "blocked"),
    ):
        response = await manage("post", "/v1/end_users/x", body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    too_long = await manage("get", "/v1/end_users/" + "x" * 257)
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "end_user"


async def test_another_tenants_end_users_are_neither_listed_nor_removed(
    app, make_tenant, make_key, async_client
):
    _, manage, _ = app
    other = await sync_to_async(make_tenant)("Other")
    theirs = _call(async_client, await sync_to_async(make_key)(other, scopes=["end_users"]))
    await theirs("post", "/v1/end_users/shared-name", {"blocked": True})

    assert (await manage("get", "/v1/end_users")).json()["data"] == []
    assert (await manage("get", "/v1/end_users/shared-name")).json()["blocked"] is False
    assert (await manage("delete", "/v1/end_users/shared-name")).status_code == 404
    assert (await theirs("get", "/v1/end_users/shared-name")).json()["blocked"] is True
