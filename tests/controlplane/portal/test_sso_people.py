"""Who a validated ID token signs in (controlplane.portal.services.sso_user_for_claims): the
person linked to its subject, else the tenant user with its verified email, else a new person
of the provider's tenant; never someone of another tenant, nor staff, nor an unverified
address."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from controlplane.portal.models import IdentityProvider
from controlplane.portal.services import SsoRefused, sso_user_for_claims

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(acme) -> IdentityProvider:
    return IdentityProvider.objects.create(
        name="Acme SSO",
        tenant=acme.tenant,
        issuer="https://idp.acme.test",
        client_id="platform",
        email_domains="acme.test, acme-labs.test",
    )


def _claims(email: str, sub: str = "s-1", verified=True) -> dict:
    return {"sub": sub, "email": email, "email_verified": verified}


def test_a_new_person_of_the_domain_joins_the_tenant_as_the_default_role(provider, acme):
    user = sso_user_for_claims(provider=provider, claims=_claims("New.Dev@Acme-Labs.test"))
    assert user.email == "new.dev@acme-labs.test"
    assert user.tenant_membership.tenant == acme.tenant
    assert user.tenant_membership.role == "member"
    assert not user.has_usable_password() and not user.is_staff
    # The next sign-in matches the subject, even with another email on the token.
    again = sso_user_for_claims(provider=provider, claims=_claims("renamed@acme.test"))
    assert again == user


def test_the_existing_owner_is_matched_by_email(provider, acme):
    user = sso_user_for_claims(provider=provider, claims=_claims(acme.owner_email.upper()))
    assert user.email == acme.owner_email
    assert user.tenant_membership.role == "owner"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        (_claims("dev@acme.test", verified=False), "has not verified"),
        ({"sub": "s-1", "email": "dev@acme.test"}, "has not verified"),
        (_claims("dev@elsewhere.test"), "not an address of Acme SSO"),
        ({"sub": "s-1", "email_verified": True}, "no email address"),
        ({"email": "dev@acme.test", "email_verified": True}, "no subject"),
    ],
)
def test_tokens_that_vouch_for_no_address_of_the_company_are_refused(provider, claims, reason):
    with pytest.raises(SsoRefused, match=reason):
        sso_user_for_claims(provider=provider, claims=claims)
    assert not get_user_model().objects.filter(email="dev@acme.test").exists()


def test_another_tenants_person_and_staff_are_not_taken_over(provider, globex, django_user_model):
    provider.email_domains = ""  # any verified address of this provider
    provider.save()
    django_user_model.objects.create_user("op", email="op@acme.test", is_staff=True)
    for email in (globex.owner_email, "op@acme.test"):
        with pytest.raises(SsoRefused, match="belongs to no tenant of this identity provider"):
            sso_user_for_claims(provider=provider, claims=_claims(email, sub=email))


def test_without_provisioning_only_known_people_sign_in(provider, acme):
    provider.provision_users = False
    provider.save()
    with pytest.raises(SsoRefused, match="ask your tenant's owner"):
        sso_user_for_claims(provider=provider, claims=_claims("stranger@acme.test"))
    assert sso_user_for_claims(provider=provider, claims=_claims(acme.owner_email)).email == (
        acme.owner_email
    )


def test_a_removed_person_cannot_come_back_through_their_subject(provider, acme):
    user = sso_user_for_claims(provider=provider, claims=_claims("dev@acme.test"))
    user.tenant_membership.delete()
    with pytest.raises(SsoRefused):
        sso_user_for_claims(provider=provider, claims=_claims("dev@acme.test"))


def test_sso_email_picks_the_provider_by_domain(client, provider):
    response = client.post("/portal/sso/start/", {"email": "someone@nowhere.test"})
    assert response.status_code == 400
    assert b"No single sign-on is set up" in response.content


def test_a_callback_this_browser_did_not_start_is_refused(client, provider):
    response = client.get("/portal/sso/callback/?code=forged&state=forged")
    assert response.status_code == 400
    assert b"not for this browser" in response.content


def test_the_admin_adds_a_provider_and_a_tenant_user_with_an_invitation(admin_client, acme):
    response = admin_client.post(
        "/admin/portal/identityprovider/add/",
        {
            "name": "Acme Okta",
            "tenant": acme.tenant.pk,
            "is_active": "on",
            "issuer": "https://acme.okta.test",
            "client_id": "platform",
            "client_secret": "s3cret",
            "email_domains": "acme.test",
            "provision_users": "on",
            "default_role": "viewer",
            "identities-TOTAL_FORMS": "0",
            "identities-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    provider = IdentityProvider.objects.get(name="Acme Okta")
    assert provider.discovery_url == "https://acme.okta.test/.well-known/openid-configuration"
    added = admin_client.post(
        "/admin/portal/tenantmembership/add/",
        {"email": "ops@acme.test", "tenant": acme.tenant.pk, "role": "member"},
        follow=True,
    )
    assert "/portal/invitation/" in added.content.decode()
    user = get_user_model().objects.get(email="ops@acme.test")
    assert user.tenant_membership.role == "member" and not user.is_staff
