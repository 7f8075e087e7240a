"""End users in the admin: an operator sets a block through the add form, and it reaches the
Redis copy admission reads; a second row for the same end user is a form error, not a 500."""

from __future__ import annotations

import pytest

from controlplane.common.redis_clients import sync_redis
from controlplane.end_users.controls import controls_key
from controlplane.end_users.models import EndUser

pytestmark = pytest.mark.django_db


def test_an_operator_blocks_an_end_user_from_the_admin(
    admin_client, make_tenant, django_capture_on_commit_callbacks
):
    tenant = make_tenant("Admin made")
    form = {"tenant": tenant.pk, "name": "mallory", "blocked": "on", "note": "abuse report"}
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post("/admin/end_users/enduser/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = EndUser.objects.get()
    assert (row.name, row.blocked, row.note) == ("mallory", True, "abuse report")
    assert sync_redis().hget(controls_key(tenant.pk), "mallory") == b"-1 1"

    again = admin_client.post("/admin/end_users/enduser/add/", form)
    assert again.status_code == 200
    assert "already exists" in again.content.decode()
    assert EndUser.objects.count() == 1

    page = admin_client.get(f"/admin/end_users/enduser/{row.pk}/change/").content.decode()
    assert "Spent this month" in page and "0.0000 USD" in page
    assert admin_client.get("/admin/end_users/endusermonthlyspend/").status_code == 200
