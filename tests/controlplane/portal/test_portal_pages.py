"""The portal's pages through Django's test client: a tenant's people see their own tenant's
keys, usage and stored responses, and nothing of another tenant, whatever the URL says."""

from __future__ import annotations

from datetime import date

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from controlplane.chat_store.services import completion_store
from controlplane.responses.models import StoredResponse
from controlplane.tenants.models import ApiKey
from controlplane.usage.events import UsageEvent, encode_event, usage_queue_key
from controlplane.usage.models import DailyUsage, UsageRecord
from tests.support.portal_people import PASSWORD

pytestmark = pytest.mark.django_db


def _stored_response(tenant, response_id: str, text: str) -> StoredResponse:
    return StoredResponse.objects.create(
        id=response_id,
        tenant=tenant,
        key_prefix="sk-test",
        model="tiny",
        status="completed",
        input_items=[{"role": "user", "content": "hi"}],
        response={
            "output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}]
        },
    )


def test_strangers_are_sent_to_the_sign_in_page(client):
    response = client.get("/portal/keys/")
    assert response.status_code == 302
    assert response["Location"] == "/portal/login/?next=/portal/keys/"


def test_a_wrong_password_is_refused_with_a_message(client, acme):
    response = client.post("/portal/login/", {"username": acme.owner_email, "password": "not it"})
    assert response.status_code == 200
    assert b"did not match an account" in response.content


def test_keys_page_lists_the_tenants_own_keys_only(acme_client, acme, globex):
    page = acme_client.get("/portal/keys/").content.decode()
    assert acme.key.prefix in page
    assert globex.key.prefix not in page
    assert "Acme" in page and "Globex" not in page


def test_a_created_key_is_shown_once_with_a_working_snippet(acme_client, acme):
    response = acme_client.post(
        "/portal/keys/", {"name": "ci", "scopes": ["chat.completions", "models"]}
    )
    page = response.content.decode()
    key = ApiKey.objects.get(tenant=acme.tenant, name="ci")
    assert key.scopes == ["chat.completions", "models"]
    secret = page.split('id="api-key-secret">')[1].split("<")[0]
    assert secret.startswith(key.prefix)
    assert f'base_url="http://testserver/v1", api_key="{secret}"' in page
    assert response["Cache-Control"].startswith("max-age=0")
    assert secret not in acme_client.get("/portal/keys/").content.decode()


def test_the_admin_scope_is_not_offered_nor_accepted(acme_client, acme):
    assert b'value="admin"' not in acme_client.get("/portal/keys/").content
    response = acme_client.post("/portal/keys/", {"name": "x", "scopes": ["admin"]})
    assert b"admin is not one of the available choices" in response.content
    assert not ApiKey.objects.filter(tenant=acme.tenant, name="x").exists()


def test_revoking_asks_first_then_revokes(acme_client, acme):
    url = f"/portal/keys/{acme.key.pk}/revoke/"
    assert b"cannot be undone" in acme_client.get(url).content
    acme.key.refresh_from_db()
    assert acme.key.revoked_at is None
    assert acme_client.post(url).status_code == 302
    acme.key.refresh_from_db()
    assert acme.key.revoked_at is not None


def test_another_tenants_key_and_response_are_404(acme_client, globex):
    _stored_response(globex.tenant, "resp_globex", "globex secret")
    for url in (
        f"/portal/keys/{globex.key.pk}/revoke/",
        "/portal/responses/resp_globex/",
    ):
        assert acme_client.get(url).status_code == 404, url
    assert acme_client.post(f"/portal/keys/{globex.key.pk}/revoke/").status_code == 404
    globex.key.refresh_from_db()
    assert globex.key.revoked_at is None


def test_stored_responses_of_the_tenant_only(acme_client, acme, globex):
    _stored_response(acme.tenant, "resp_acme", "hello from acme")
    _stored_response(globex.tenant, "resp_globex", "globex secret")
    listing = acme_client.get("/portal/responses/").content.decode()
    assert "resp_acme" in listing and "resp_globex" not in listing
    detail = acme_client.get("/portal/responses/resp_acme/").content.decode()
    assert "hello from acme" in detail


def _stored_chat(tenant, completion_id: str, answer: str, **metadata):
    message = {
        "role": "assistant",
        "content": answer,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
        ],
    }
    return completion_store(
        tenant_id=tenant.id,
        key_prefix="sk-test",
        completion={
            "id": completion_id,
            "model": "tiny",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        },
        messages=[{"role": "user", "content": [{"type": "text", "text": "question for tiny"}]}],
        metadata=metadata,
    )


def test_stored_chat_completions_of_the_tenant_only(acme_client, acme, globex):
    _stored_chat(acme.tenant, "chatcmpl-acme", "hello from acme", run="nightly")
    _stored_chat(globex.tenant, "chatcmpl-globex", "globex secret")
    listing = acme_client.get("/portal/chat-completions/").content.decode()
    assert "chatcmpl-acme" in listing and "run=nightly" in listing
    assert "chatcmpl-globex" not in listing
    detail = acme_client.get("/portal/chat-completions/chatcmpl-acme/").content.decode()
    assert "question for tiny" in detail and "hello from acme" in detail
    assert "f({&quot;x&quot;: 1})" in detail and "tool_calls" in detail
    assert acme_client.get("/portal/chat-completions/chatcmpl-globex/").status_code == 404


def test_usage_per_day_key_and_model_of_the_tenant_only(acme_client, acme, globex, redis_client):
    today = date.today()
    for tenant, tokens in ((acme.tenant, 40), (globex.tenant, 999)):
        DailyUsage.objects.create(
            date=today,
            tenant=tenant,
            key_prefix=f"sk-{tenant.slug}",
            model="tiny",
            num_requests=2,
            prompt_tokens=tokens,
            completion_tokens=2,
        )
    page = acme_client.get("/portal/usage/").content.decode()
    assert "<strong>2</strong> requests" in page and "<strong>42</strong> tokens" in page
    assert "sk-acme" in page
    assert "sk-globex" not in page and "999" not in page


def test_usage_per_end_user_counts_flushed_and_queued_requests(
    acme_client, acme, globex, redis_client
):
    def record(tenant, end_user: str, tokens: int, status: int = 200) -> None:
        UsageRecord.objects.create(
            created_at=timezone.now(),
            tenant=tenant,
            model="tiny",
            end_user=end_user,
            prompt_tokens=tokens,
            completion_tokens=1,
            status=status,
        )

    record(acme.tenant, "alice", 10)
    record(acme.tenant, "alice", 20, status=500)
    record(acme.tenant, "bob", 100)
    record(acme.tenant, "", 1000)  # named no end user: not listed
    record(globex.tenant, "mallory", 5)
    queued = UsageEvent(
        finished_at=timezone.now().timestamp(),
        request_id="chatcmpl-q",
        tenant_id=acme.tenant.pk,
        key_id=acme.key.pk,
        key_prefix=acme.key.prefix,
        model="tiny",
        adapter="",
        prompt_tokens=7,
        completion_tokens=1,
        cached_tokens=0,
        time_to_first_token=None,
        latency=0.1,
        status=200,
        finish_reason="stop",
        event_id="e-queued",
        end_user="alice",
    )
    redis_client.rpush(usage_queue_key(), encode_event(queued))
    page = acme_client.get("/portal/usage/").content.decode()
    table = page.split('id="usage-by-end-user"')[1].split("</table>")[0]
    rows = [row.split("</td>")[0].split(">")[-1] for row in table.split("<tr><td>")[1:]]
    assert rows == ["bob", "alice"]  # most tokens first: 101, then 10 + 20 + 7 + 3
    alice = table.split("<tr><td>alice</td>")[1].split("</tr>")[0]
    assert "<td>3</td><td>1</td>" in alice  # three requests, one of them an error
    assert "mallory" not in page


def test_a_viewer_cannot_create_or_revoke_keys(client, acme):
    from controlplane.portal.services import tenant_user_create

    viewer = tenant_user_create(tenant=acme.tenant, email="v@acme.test", role="viewer").user
    client.force_login(viewer)
    assert b"Create a key" not in client.get("/portal/keys/").content
    client.post("/portal/keys/", {"name": "nope"})
    assert not ApiKey.objects.filter(name="nope").exists()
    client.post(f"/portal/keys/{acme.key.pk}/revoke/")
    acme.key.refresh_from_db()
    assert acme.key.revoked_at is None


def test_staff_without_a_tenant_see_that_they_have_none(client, django_user_model):
    staff = django_user_model.objects.create_user("op", password=PASSWORD, is_staff=True)
    client.force_login(staff)
    response = client.get("/portal/keys/")
    assert response.status_code == 403
    assert b"belongs to no tenant" in response.content


def test_an_owner_adds_a_member_who_sets_a_password_and_signs_in(acme_client, client, acme):
    page = acme_client.post(
        "/portal/members/", {"email": "New@Acme.test", "role": "member"}
    ).content.decode()
    link = page.split('id="invitation-url">')[1].split("<")[0]
    assert link.startswith("http://testserver/portal/invitation/")
    acme_client.post("/portal/logout/")
    # Django's reset view moves the token into the session, then asks for the password.
    form_page = client.get(link, follow=True)
    assert b"Set your password" in form_page.content
    new_password = "a long new password 42"
    client.post(
        form_page.redirect_chain[-1][0],
        {"new_password1": new_password, "new_password2": new_password},
    )
    response = client.post(
        "/portal/login/", {"username": "new@acme.test", "password": new_password}
    )
    assert response.status_code == 302
    page = client.get("/portal/keys/").content.decode()
    assert acme.key.prefix in page and "member" in page
    # Used once: the link is void now.
    assert b"no longer valid" in client.get(link, follow=True).content


def test_an_owner_cannot_remove_another_tenants_member(acme_client, globex):
    other = get_user_model().objects.get(email=globex.owner_email).tenant_membership
    assert acme_client.post(f"/portal/members/{other.pk}/remove/").status_code == 404
    other.user.refresh_from_db()
    assert other.user.is_active


def test_wrong_portal_passwords_lock_the_account_out_as_the_admins_do(
    client, acme, redis_client, settings
):
    settings.ADMIN_LOGIN_FAILURES_PER_USERNAME = 3
    for _ in range(3):
        client.post("/portal/login/", {"username": acme.owner_email, "password": "wrong"})
    locked = client.post("/portal/login/", {"username": acme.owner_email, "password": PASSWORD})
    assert locked.status_code == 429
    assert "Too many failed sign-in attempts" in locked.content.decode()
    assert client.get("/portal/keys/").status_code == 302  # not signed in


def test_usage_shows_the_cost_of_written_and_still_queued_requests(acme_client, acme, redis_client):
    import time
    from decimal import Decimal

    from controlplane.billing.money import amount_to_units
    from controlplane.billing.services import model_price_set
    from controlplane.usage.events import UsageEvent, encode_event, usage_queue_key

    model_price_set(model="tiny", input_per_million=Decimal("1"), output_per_million=Decimal("2"))
    DailyUsage.objects.create(
        date=date.today(),
        tenant=acme.tenant,
        key_prefix=acme.key.prefix,
        model="tiny",
        num_requests=1,
        prompt_tokens=10,
        completion_tokens=1,
        cost_units=amount_to_units(Decimal("0.5")),
    )
    queued = UsageEvent(
        finished_at=time.time() + 1,  # after the price started
        request_id="r-queued",
        tenant_id=acme.tenant.pk,
        key_id=acme.key.pk,
        key_prefix=acme.key.prefix,
        model="tiny",
        adapter="",
        prompt_tokens=1000,
        completion_tokens=500,
        cached_tokens=0,
        time_to_first_token=0.1,
        latency=0.5,
        status=200,
        finish_reason="stop",
    )
    redis_client.rpush(usage_queue_key(), encode_event(queued))
    page = acme_client.get("/portal/usage/").content.decode()
    # 0.5 written, plus 1,000 prompt tokens at 1 and 500 completion tokens at 2 per million.
    assert '<td class="cost">0.5020 USD</td>' in page
    assert '<strong id="usage-cost">0.5020 USD</strong>' in page


def test_a_tenant_with_zero_data_retention_is_told_why_nothing_is_stored(acme_client, acme):
    assert "zero-data-retention" not in acme_client.get("/portal/responses/").content.decode()
    acme.tenant.zero_data_retention = True
    acme.tenant.save(update_fields=["zero_data_retention"])
    for url in ("/portal/responses/", "/portal/chat-completions/"):
        assert 'id="zero-data-retention"' in acme_client.get(url).content.decode(), url
