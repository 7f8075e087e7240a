"""The admin calls the services: keys are shown once, revoked, salts rotated, all audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controlplane.access.principals import stored_key_principal
from controlplane.audit.models import AuditEvent
from controlplane.tenants.key_secrets import secret_matches
from controlplane.tenants.models import ApiKey, Tenant
from controlplane.tenants.selectors import key_record_for

pytestmark = pytest.mark.django_db


# What the add and change forms hold unless the operator edits them.
SHARE_DEFAULTS = {"share_weight": "1", "service_class": "interactive"}


def test_create_tenant_and_key_shows_the_secret_once(staff_client, redis_client):
    response = staff_client.post(
        reverse("admin:tenants_tenant_add"),
        {
            "name": "Acme Corp",
            "is_active": "on",
            "requests_per_minute": "60",
            **SHARE_DEFAULTS,
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
    listing = reverse("admin:tenants_apikey_changelist")
    asked = staff_client.post(listing, {"action": "revoke", "_selected_action": [key.pk]})
    assert "Yes, revoke" in asked.content.decode()  # the action asks first
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None
    staff_client.post(listing, {"action": "revoke", "_selected_action": [key.pk], "confirm": "yes"})
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
            **SHARE_DEFAULTS,
            "api_keys-TOTAL_FORMS": "0",
            "api_keys-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content[:3000]
    assert Tenant.objects.get(pk=tenant.pk).requests_per_minute == 20
    event = AuditEvent.objects.get(action="tenant.update")
    assert event.details == {"requests_per_minute": [10, 20]}


def test_a_key_page_is_read_only_and_revokes_through_a_confirmation(
    staff_client, make_tenant, make_key, redis_client
):
    key, _ = make_key(make_tenant("Acme"))
    page = staff_client.get(reverse("admin:tenants_apikey_change", args=[key.pk])).content.decode()
    assert 'name="_save"' not in page  # nothing on it can be changed
    revoke_url = reverse("admin:tenants_apikey_revoke", args=[key.pk])
    assert f'href="{revoke_url}"' in page

    confirmation = staff_client.get(revoke_url).content.decode()
    assert "Yes, revoke" in confirmation and key.prefix in confirmation
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None  # asking revokes nothing

    assert staff_client.post(revoke_url).status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert AuditEvent.objects.filter(action="api_key.revoke").count() == 1
    page = staff_client.get(reverse("admin:tenants_apikey_change", args=[key.pk])).content.decode()
    assert revoke_url not in page  # a revoked key offers no second revocation


def test_scopes_read_the_same_on_the_list_and_the_key_page(
    staff_client, make_tenant, make_key, redis_client
):
    key, _ = make_key(make_tenant("Acme"))
    assert key.scopes == []
    listing = staff_client.get(reverse("admin:tenants_apikey_changelist")).content.decode()
    detail = staff_client.get(reverse("admin:tenants_apikey_change", args=[key.pk]))
    assert "all endpoints" in listing and "all endpoints" in detail.content.decode()


def test_the_created_key_page_has_a_copy_button_and_the_real_base_url(
    staff_client, make_tenant, redis_client
):
    tenant = make_tenant("Acme")
    response = staff_client.post(
        reverse("admin:tenants_apikey_add"), {"tenant": tenant.pk, "name": "ci"}
    )
    page = response.content.decode()
    assert 'data-copy-target="api-key-secret"' in page
    assert 'base_url="http://testserver/v1"' in page and ".../v1" not in page


def test_fair_share_weight_and_class_are_edited_listed_and_reach_the_principal(
    staff_client, make_tenant, redis_client
):
    tenant = make_tenant("Acme")
    form = {
        "name": "Acme",
        "is_active": "on",
        "api_keys-TOTAL_FORMS": "0",
        "api_keys-INITIAL_FORMS": "0",
    }
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    refused = staff_client.post(url, {**form, "share_weight": "0", "service_class": "gold"})
    assert refused.status_code == 200
    assert Tenant.objects.get(pk=tenant.pk).share_weight == 1
    response = staff_client.post(url, {**form, "share_weight": "3", "service_class": "batch"})
    assert response.status_code == 302, response.content[:3000]
    tenant.refresh_from_db()
    assert (tenant.share_weight, tenant.service_class) == (3, "batch")
    event = AuditEvent.objects.get(action="tenant.update")
    assert event.details == {"share_weight": [1, 3], "service_class": ["interactive", "batch"]}

    listing = staff_client.get(reverse("admin:tenants_tenant_changelist")).content.decode()
    assert "weight 3, batch" in listing

    # What the API sends the engines: the opaque id, never the name or the salt.
    principal = stored_key_principal(key_record_for(None, tenant), endpoint="chat.completions")
    assert (principal.share_weight, principal.service_class) == (3, "batch")
    assert principal.engine_tenant == f"t{tenant.pk}"


def test_zero_data_retention_is_set_in_the_admin_audited_and_reaches_the_principal(
    staff_client, make_tenant, redis_client
):
    tenant = make_tenant("Hushed")
    form = {
        "name": "Hushed",
        "is_active": "on",
        "share_weight": "1",
        "service_class": "interactive",
        "api_keys-TOTAL_FORMS": "0",
        "api_keys-INITIAL_FORMS": "0",
    }
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    assert "Zero data retention" in staff_client.get(url).content.decode()
    response = staff_client.post(url, {**form, "zero_data_retention": "on"})
    assert response.status_code == 302, response.content[:3000]
    tenant.refresh_from_db()
    assert tenant.zero_data_retention
    event = AuditEvent.objects.get(action="tenant.update")
    assert event.details == {"zero_data_retention": [False, True]}
    principal = stored_key_principal(key_record_for(None, tenant), endpoint="chat.completions")
    assert principal.zero_data_retention
