"""The admin calls the services: keys are shown once, revoked, salts rotated, all audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEvent
from controlplane.tenants.key_secrets import secret_matches
from controlplane.tenants.models import ApiKey, Tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def test_create_tenant_and_key_shows_the_secret_once(staff_client, redis_client):
    response = staff_client.post(
        reverse("admin:tenants_tenant_add"),
        {
            "name": "Acme Corp",
            "is_active": "on",
            "requests_per_minute": "60",
            "api_keys-TOTAL_FORMS": "0",
            "api_keys-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    tenant = Tenant.objects.get(name="Acme Corp")
    assert tenant.slug == "acme-corp" and len(tenant.cache_salt) == 64
    assert tenant.requests_per_minute == 60

    response = staff_client.post(
        reverse("admin:tenants_apikey_add"),
        {"tenant": tenant.pk, "name": "ci", "scopes": ["chat.completions", "models"]},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    key = ApiKey.objects.get(tenant=tenant)
    page = response.content.decode()
    secret = page.split('id="api-key-secret"', 1)[1].split(">", 1)[1].split("<", 1)[0]
    assert secret.startswith(key.prefix) and secret_matches(secret, key.secret_hash)
    assert key.scopes == ["chat.completions", "models"]

    # Never again: the change page and the list show only the prefix.
    for url in [
        reverse("admin:tenants_apikey_change", args=[key.pk]),
        reverse("admin:tenants_apikey_changelist"),
        reverse("admin:tenants_tenant_change", args=[tenant.pk]),
    ]:
        body = staff_client.get(url).content.decode()
        assert key.prefix in body and secret not in body
        assert tenant.cache_salt not in body

    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor_label"))
    assert ("tenant.create", "root") in actions and ("api_key.create", "root") in actions


def test_revoke_and_rotate_actions_go_through_the_services(
    staff_client, make_tenant, make_key, redis_client
):
    tenant = make_tenant("Acme")
    key, _ = make_key(tenant)
    salt = tenant.cache_salt
    staff_client.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    staff_client.post(
        reverse("admin:tenants_tenant_changelist"),
        {"action": "rotate_cache_salt", "_selected_action": [tenant.pk]},
    )
    assert Tenant.objects.get(pk=tenant.pk).cache_salt != salt
    events = AuditEvent.objects.filter(actor_label="root").values_list("action", flat=True)
    assert set(events) == {"api_key.revoke", "tenant.rotate_salt"}


def test_key_with_past_expiry_is_a_form_error(staff_client, make_tenant, redis_client):
    tenant = make_tenant("Acme")
    response = staff_client.post(
        reverse("admin:tenants_apikey_add"),
        {"tenant": tenant.pk, "name": "x", "expires_at_0": "2000-01-01", "expires_at_1": "00:00"},
    )
    assert response.status_code == 200
    assert "must be in the future" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_editing_limits_is_audited_with_the_change(staff_client, make_tenant, redis_client):
    tenant = make_tenant("Acme", requests_per_minute=10)
    response = staff_client.post(
        reverse("admin:tenants_tenant_change", args=[tenant.pk]),
        {
            "name": "Acme",
            "is_active": "on",
            "requests_per_minute": "20",
            "api_keys-TOTAL_FORMS": "0",
            "api_keys-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content[:3000]
    assert Tenant.objects.get(pk=tenant.pk).requests_per_minute == 20
    event = AuditEvent.objects.get(action="tenant.update")
    assert event.details == {"requests_per_minute": [10, 20]}
