"""Reads on tenants and API keys."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import QuerySet

from controlplane.tenants.models import ApiKey, Tenant


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """Everything authentication needs about one key, detached from the ORM so it can be cached.

    ``key_id`` 0 stands for a staff session (no key), ``expires_at`` is a Unix timestamp.
    """

    key_id: int
    prefix: str
    secret_hash: str
    revoked: bool
    expires_at: float | None
    scopes: frozenset[str]
    tenant_id: int
    tenant_slug: str
    tenant_active: bool
    cache_salt: str
    allowed_models: frozenset[str] | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    max_concurrent_requests: int | None
    monthly_token_budget: int | None
    share_weight: int = 1
    service_class: str = "interactive"
    monthly_spend_budget: Decimal | None = None  # the tenant's
    key_monthly_spend_budget: Decimal | None = None  # the key's own
    zero_data_retention: bool = False
    end_user_spend_budget: Decimal | None = None  # the tenant's budget per end user
    end_user_controls: bool = False  # whether the tenant set controls on some end users


def _tenant_model_names(tenant: Tenant) -> frozenset[str] | None:
    names = frozenset(tenant.allowed_models.values_list("name", flat=True))
    return names or None


def key_record_for(key: ApiKey | None, tenant: Tenant) -> KeyRecord:
    return KeyRecord(
        key_id=key.pk if key else 0,
        prefix=key.prefix if key else "session",
        secret_hash=key.secret_hash if key else "",
        revoked=key.revoked_at is not None if key else False,
        expires_at=key.expires_at.timestamp() if key and key.expires_at else None,
        scopes=frozenset(key.scopes or ()) if key else frozenset(),
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        tenant_active=tenant.is_active,
        cache_salt=tenant.cache_salt,
        allowed_models=_tenant_model_names(tenant),
        requests_per_minute=tenant.requests_per_minute,
        tokens_per_minute=tenant.tokens_per_minute,
        max_concurrent_requests=tenant.max_concurrent_requests,
        monthly_token_budget=tenant.monthly_token_budget,
        share_weight=tenant.share_weight,
        service_class=tenant.service_class,
        monthly_spend_budget=tenant.monthly_spend_budget,
        key_monthly_spend_budget=key.monthly_spend_budget if key else None,
        zero_data_retention=tenant.zero_data_retention,
        end_user_spend_budget=tenant.end_user_monthly_spend_budget,
        # One more query per key load (cached): the end users app bumps the auth epoch
        # when it adds or removes controls.
        end_user_controls=tenant.end_users.exists(),
    )


def key_record_load(*, prefix: str) -> KeyRecord | None:
    """The key with this visible prefix, with its tenant's grants and limits (three queries)."""
    key = ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()
    if key is None:
        return None
    return key_record_for(key, key.tenant)


def tenant_list(*, active_only: bool = False) -> QuerySet[Tenant]:
    qs = Tenant.objects.all()
    return qs.filter(is_active=True) if active_only else qs


def tenant_get(*, name_or_slug: str) -> Tenant | None:
    """A tenant by exact name, else by slug."""
    return (
        Tenant.objects.filter(name=name_or_slug).first()
        or Tenant.objects.filter(slug=name_or_slug).first()
    )


def tenant_get_by_pk(*, pk: int) -> Tenant:
    """The stored row (raises Tenant.DoesNotExist)."""
    return Tenant.objects.get(pk=pk)


def api_key_list(*, tenant: Tenant, include_revoked: bool = True) -> QuerySet[ApiKey]:
    qs = ApiKey.objects.filter(tenant=tenant)
    return qs if include_revoked else qs.filter(revoked_at__isnull=True)


def api_key_get_by_prefix(*, prefix: str) -> ApiKey | None:
    return ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()


def tenant_staff_owner(*, tenant: Tenant):
    """The active staff user whose own tenant this is (their playground's), else None: the
    only tenant whose keys may hold the ``admin`` scope."""
    user = tenant.playground_user
    return user if user is not None and user.is_active and user.is_staff else None


def api_key_staff_owner(*, key_id: int) -> tuple[ApiKey, object] | None:
    """The key and the active staff user who owns it, else None (a customer's key, or an
    owner no longer staff)."""
    key = ApiKey.objects.select_related("tenant__playground_user").filter(pk=key_id).first()
    owner = tenant_staff_owner(tenant=key.tenant) if key is not None else None
    return (key, owner) if owner is not None else None
