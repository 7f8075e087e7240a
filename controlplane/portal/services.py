"""Writes of the tenant portal: keys and members within the signed-in person's tenant and
role, and the people single sign-on brings in. Key writes go through the tenants' services,
so the portal, the admin and the commands share one set of rules and one audit log."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_record
from controlplane.end_users.models import EndUser
from controlplane.end_users.services import end_user_remove_controls, end_user_set_controls
from controlplane.portal.models import ExternalIdentity, IdentityProvider, Role, TenantMembership
from controlplane.portal.selectors import tenant_num_active_keys
from controlplane.tenants.models import ADMIN_SCOPE, ApiKey, Tenant
from controlplane.tenants.services import CreatedKey, api_key_create, api_key_revoke

__all__ = [
    "SsoRefused",
    "member_add",
    "member_remove",
    "portal_end_user_remove",
    "portal_end_user_set",
    "portal_key_create",
    "portal_key_revoke",
    "sso_user_for_claims",
    "tenant_user_create",
]


def _require_key_rights(membership: TenantMembership) -> None:
    if not membership.can_manage_keys:
        raise PermissionDenied("viewers cannot create or revoke keys")


def portal_key_create(
    *,
    membership: TenantMembership,
    name: str,
    scopes: Iterable[str] = (),
    expires_in_days: int | None = None,
) -> CreatedKey:
    """A key of the member's tenant, under the tenant's limits; never the admin scope."""
    _require_key_rights(membership)
    scopes = list(scopes)
    if ADMIN_SCOPE in scopes:
        raise ValidationError("the admin scope is not for tenant keys")
    limit = settings.PORTAL_MAX_KEYS_PER_TENANT
    if tenant_num_active_keys(tenant=membership.tenant) >= limit:
        raise ValidationError(f"a tenant may hold {limit} active keys; revoke one first")
    expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
    return api_key_create(
        tenant=membership.tenant,
        name=name,
        scopes=scopes,
        expires_at=expires_at,
        actor=membership.user,
    )


def portal_key_revoke(*, membership: TenantMembership, key: ApiKey) -> ApiKey:
    _require_key_rights(membership)
    if key.tenant_id != membership.tenant_id:  # selectors already 404; never trust a caller
        raise PermissionDenied("not a key of your tenant")
    return api_key_revoke(key=key, actor=membership.user)


def _require_owner(membership: TenantMembership, what: str) -> None:
    if not membership.can_manage_members:
        raise PermissionDenied(f"only owners {what}")


def portal_end_user_set(
    *,
    membership: TenantMembership,
    name: str,
    monthly_spend_budget: Decimal | None = None,
    blocked: bool = False,
) -> EndUser:
    """Set a budget or a block on one end user of the member's tenant (owners only)."""
    _require_owner(membership, "set end-user budgets and blocks")
    return end_user_set_controls(
        tenant=membership.tenant,
        name=name,
        monthly_spend_budget=monthly_spend_budget,
        blocked=blocked,
        actor=membership.user,
    )


def portal_end_user_remove(*, membership: TenantMembership, end_user: EndUser) -> None:
    _require_owner(membership, "remove end-user controls")
    if end_user.tenant_id != membership.tenant_id:  # selectors already 404
        raise PermissionDenied("not an end user of your tenant")
    end_user_remove_controls(end_user=end_user, actor=membership.user)


@transaction.atomic
def tenant_user_create(
    *, tenant: Tenant, email: str, role: str, actor=None, actor_label: str | None = None
) -> TenantMembership:
    """A person of ``tenant``, signed in by their email; no password until they set one (from
    an invitation link) or sign in through their company's identity provider."""
    email = get_user_model().objects.normalize_email((email or "").strip()).lower()
    if "@" not in email:
        raise ValidationError("an email address is needed")
    if role not in Role.values:
        raise ValidationError(f"unknown role {role!r}")
    user_model = get_user_model()
    if user_model.objects.filter(username__iexact=email).exists() or (
        user_model.objects.filter(email__iexact=email).exists()
    ):
        raise ValidationError(f"{email} already has an account")
    user = user_model.objects.create_user(username=email, email=email)  # unusable password
    membership = TenantMembership.objects.create(user=user, tenant=tenant, role=role)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="tenant_user.add",
        target=tenant,
        details={"email": email, "role": role},
    )
    return membership


def member_add(*, membership: TenantMembership, email: str, role: str) -> TenantMembership:
    """An owner adds a person to their own tenant."""
    if not membership.can_manage_members:
        raise PermissionDenied("only owners add members")
    return tenant_user_create(
        tenant=membership.tenant, email=email, role=role, actor=membership.user
    )


@transaction.atomic
def member_remove(*, membership: TenantMembership, member: TenantMembership) -> None:
    """An owner removes another person of their tenant; their account is deactivated (its
    sessions end at their next request), their keys stay with the tenant."""
    if not membership.can_manage_members:
        raise PermissionDenied("only owners remove members")
    if member.tenant_id != membership.tenant_id:
        raise PermissionDenied("not a member of your tenant")
    if member.pk == membership.pk:
        raise ValidationError("you cannot remove yourself")
    user = member.user
    member.delete()
    user.is_active = False
    user.save(update_fields=["is_active"])
    audit_record(
        actor=membership.user,
        action="tenant_user.remove",
        target=membership.tenant,
        details={"email": user.email},
    )


class SsoRefused(Exception):
    """A sign-in the provider vouched for but the platform does not accept; the message is
    shown to the person."""


def _verified_email(claims: dict) -> str:
    email = str(claims.get("email") or "").strip().lower()
    if not email or "@" not in email:
        raise SsoRefused("your identity provider sent no email address")
    # A provider that says nothing about verification is not trusted with the address.
    if claims.get("email_verified") is not True:
        raise SsoRefused(f"your identity provider has not verified {email}")
    return email


def _accept_existing(provider: IdentityProvider, user) -> None:
    membership = TenantMembership.objects.filter(user=user).first()
    if membership is None or membership.tenant_id != provider.tenant_id:
        raise SsoRefused("this account belongs to no tenant of this identity provider")
    if not user.is_active:
        raise SsoRefused("this account is deactivated")


@transaction.atomic
def sso_user_for_claims(*, provider: IdentityProvider, claims: dict):
    """The user a validated ID token signs in: the one linked to its subject, else the tenant
    user with its verified email, else (when the provider provisions) a new tenant user."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise SsoRefused("the identity provider's token names no subject")
    linked = (
        ExternalIdentity.objects.select_related("user")
        .filter(provider=provider, subject=subject)
        .first()
    )
    if linked is not None:
        _accept_existing(provider, linked.user)
        linked.save(update_fields=["last_login_at"])
        return linked.user
    email = _verified_email(claims)
    domains = provider.domains
    if domains and email.rpartition("@")[2] not in domains:
        raise SsoRefused(f"{email} is not an address of {provider.name}")
    user = get_user_model().objects.filter(email__iexact=email).first()
    if user is not None:
        _accept_existing(provider, user)
    elif not provider.provision_users:
        raise SsoRefused(f"{email} has no account; ask your tenant's owner to add you")
    else:
        user = tenant_user_create(
            tenant=provider.tenant,
            email=email,
            role=provider.default_role,
            actor_label=f"sso:{provider.name}",
        ).user
    ExternalIdentity.objects.create(provider=provider, subject=subject, user=user)
    return user
