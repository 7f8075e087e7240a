"""Tenants with a portal owner and a key, made through the real services, for the portal's
tests (tests/controlplane/portal/)."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.portal.services import tenant_user_create
from controlplane.tenants.models import ApiKey, Tenant

PASSWORD = "correct horse battery"


@dataclass
class PortalTenant:
    tenant: Tenant
    owner_email: str
    key: ApiKey


def portal_tenant(make_tenant, make_key, name: str) -> PortalTenant:
    """Tenant ``name`` with an owner (owner@SLUG.test, password PASSWORD) and one key."""
    tenant = make_tenant(name)
    email = f"owner@{tenant.slug}.test"
    user = tenant_user_create(tenant=tenant, email=email, role="owner").user
    user.set_password(PASSWORD)
    user.save()
    key, _secret = make_key(tenant, name=f"{tenant.slug}-key")
    return PortalTenant(tenant=tenant, owner_email=email, key=key)
