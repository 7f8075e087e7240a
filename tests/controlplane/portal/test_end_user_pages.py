"""The portal's end users page: an owner sees this month's spend per end user of their own
tenant only, and sets or removes budgets and blocks, which reach admission at once."""

from __future__ import annotations

from decimal import Decimal

import pytest

from controlplane.common.redis_clients import sync_redis
from controlplane.end_users.controls import controls_key
from controlplane.end_users.models import EndUser, EndUserMonthlySpend
from controlplane.end_users.selectors import this_month
from controlplane.portal.services import tenant_user_create
from controlplane.tenants.services import tenant_update
from tests.support.html_tables import table_rows

pytestmark = pytest.mark.django_db


def _spent(tenant, name: str, amount: str, requests: int = 1) -> None:
    EndUserMonthlySpend.objects.create(
        tenant=tenant,
        end_user=name,
        period=this_month(),
        num_requests=requests,
        completion_tokens=10 * requests,
        cost_units=int(Decimal(amount) * 10**10),
    )


def _rows(page, table_id: str) -> dict[str, list[str]]:
    return table_rows(page.content.decode(), table_id)


def test_this_months_spend_per_end_user_with_the_budget_that_applies(acme_client, acme, globex):
    tenant_update(tenant=acme.tenant, end_user_monthly_spend_budget=Decimal("2"))
    _spent(acme.tenant, "alice", "2.5", requests=3)
    _spent(acme.tenant, "bob", "0.25")
    _spent(globex.tenant, "globex-user", "9")
    EndUser.objects.create(tenant=acme.tenant, name="bob", monthly_spend_budget=Decimal("10"))

    page = acme_client.get("/portal/end-users/")
    rows = _rows(page, "end-users")
    assert list(rows) == ["alice", "bob"]  # most spent first, Globex's never
    assert rows["alice"][1:] == ["3", "30", "2.5000 USD", "2.00 USD (per end user)", "over budget"]
    assert rows["bob"][4:] == ["10.00 USD", "served"]
    assert "Budget per end user: <strong>2.00 USD</strong>" in page.content.decode()
    assert list(_rows(acme_client.get("/portal/end-users/?q=ALI"), "end-users")) == ["alice"]


def test_an_owner_blocks_an_end_user_and_removes_the_block(
    acme_client, acme, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = acme_client.post(
            "/portal/end-users/", {"name": "mallory", "blocked": "on", "monthly_spend_budget": ""}
        )
    assert response.status_code == 302
    row = EndUser.objects.get(tenant=acme.tenant)
    assert (row.name, row.blocked, row.monthly_spend_budget) == ("mallory", True, None)
    assert sync_redis().hget(controls_key(acme.tenant.pk), "mallory") == b"-1 1"
    controls = _rows(acme_client.get("/portal/end-users/"), "end-user-controls")
    assert controls["mallory"][:3] == ["mallory", "per end user", "blocked"]

    with django_capture_on_commit_callbacks(execute=True):
        acme_client.post(f"/portal/end-users/{row.pk}/remove/")
    assert not EndUser.objects.exists()
    assert sync_redis().hget(controls_key(acme.tenant.pk), "mallory") is None


def test_a_budget_below_a_cent_is_refused_with_the_reason(acme_client, acme):
    response = acme_client.post("/portal/end-users/", {"name": "x", "monthly_spend_budget": "0"})
    assert response.status_code == 200
    assert "greater than or equal to 0.01" in response.content.decode()
    assert not EndUser.objects.exists()


def test_members_see_the_page_but_only_owners_set_controls(client, acme, globex):
    member = tenant_user_create(tenant=acme.tenant, email="m@acme.test", role="member").user
    client.force_login(member)
    page = client.get("/portal/end-users/").content.decode()
    assert 'id="set-end-user"' not in page
    client.post("/portal/end-users/", {"name": "mallory", "blocked": "on"})
    assert not EndUser.objects.exists()

    other = EndUser.objects.create(tenant=globex.tenant, name="theirs", blocked=True)
    client.force_login(
        tenant_user_create(tenant=acme.tenant, email="o@acme.test", role="owner").user
    )
    assert client.post(f"/portal/end-users/{other.pk}/remove/").status_code == 404
    assert EndUser.objects.filter(pk=other.pk).exists()
