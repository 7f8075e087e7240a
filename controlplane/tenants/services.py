"""Writes on tenants and API keys. The admin, the management commands and the API call these.

Every write that changes what a key may do bumps the auth epoch, so cached keys in every API
process are reloaded within seconds, and leaves an entry in the audit log.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from controlplane.audit.services import audit_record
from controlplane.common.redis_clients import redis_key, sync_redis
from controlplane.common.redis_epoch import auth_epoch_bump, catalog_epoch_bump
from controlplane.deployments.selectors import served_models_named
from controlplane.tenants.key_secrets import hash_secret, new_secret
from controlplane.tenants.models import (
    ADMIN_SCOPE,
    API_SCOPES,
    ApiKey,
    Tenant,
)
from controlplane.tenants.selectors import tenant_staff_owner
from controlplane.tenants.validation import check_limits, check_share, check_spend_budget

__all__ = [
    "RETENTION_FIELDS",
    "CreatedKey",
    "api_key_create",
    "api_key_flush_last_used",
    "api_key_revoke",
    "api_key_set_spend_budget",
    "hash_secret",
    "tenant_create",
    "tenant_get_or_create_playground",
    "tenant_rotate_cache_salt",
    "tenant_set_allowed_models",
    "tenant_update",
]

SHARE_FIELDS = ("share_weight", "service_class")
_LIMIT_FIELDS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent_requests",
    "monthly_token_budget",
)
_BUDGET_FIELDS = (
    "monthly_spend_budget",
    "end_user_monthly_spend_budget",
    "budget_alert_webhook_url",
)
RETENTION_FIELDS = ("zero_data_retention",)


def _audited(values: list) -> list:
    """Values as the audit log's JSON keeps them (amounts as strings)."""
    return [str(v) if isinstance(v, Decimal) else v for v in values]


def _new_cache_salt() -> str:
    return secrets.token_hex(32)


def _unique_slug(name: str) -> str:
    base = slugify(name)[:90] or "tenant"
    slug, n = base, 2
    while Tenant.objects.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


@transaction.atomic
def tenant_create(
    *,
    name: str,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent_requests: int | None = None,
    monthly_token_budget: int | None = None,
    share_weight: int = 1,
    service_class: str = "interactive",
    monthly_spend_budget: Decimal | None = None,
    end_user_monthly_spend_budget: Decimal | None = None,
    budget_alert_webhook_url: str = "",
    zero_data_retention: bool = False,
    actor: Any = None,
    actor_label: str | None = None,
) -> Tenant:
    name = (name or "").strip()
    if not name:
        raise ValidationError("a tenant needs a name")
    if Tenant.objects.filter(name=name).exists():
        raise ValidationError(f"a tenant named {name!r} already exists")
    limits = {
        "requests_per_minute": requests_per_minute,
        "tokens_per_minute": tokens_per_minute,
        "max_concurrent_requests": max_concurrent_requests,
        "monthly_token_budget": monthly_token_budget,
    }
    check_limits(limits)
    share = {"share_weight": share_weight, "service_class": service_class}
    check_share(share)
    spend_budget = check_spend_budget(monthly_spend_budget)
    end_user_budget = check_spend_budget(end_user_monthly_spend_budget)
    tenant = Tenant.objects.create(
        name=name,
        slug=_unique_slug(name),
        cache_salt=_new_cache_salt(),
        monthly_spend_budget=spend_budget,
        end_user_monthly_spend_budget=end_user_budget,
        budget_alert_webhook_url=budget_alert_webhook_url or "",
        zero_data_retention=bool(zero_data_retention),
        **limits,
        **share,
    )
    details = {
        **limits,
        **share,
        "zero_data_retention": bool(zero_data_retention),
        "monthly_spend_budget": None if spend_budget is None else str(spend_budget),
        "end_user_monthly_spend_budget": None if end_user_budget is None else str(end_user_budget),
    }
    audit_record(
        actor=actor, actor_label=actor_label, action="tenant.create", target=tenant, details=details
    )
    return tenant


@transaction.atomic
def tenant_update(
    *, tenant: Tenant, actor: Any = None, actor_label: str | None = None, **changes: Any
) -> Tenant:
    """Change name, activity, limits, fair share, budgets or data retention (keyword names
    as on the model)."""
    allowed = {"name", "is_active", *_LIMIT_FIELDS, *SHARE_FIELDS, *_BUDGET_FIELDS}
    allowed |= set(RETENTION_FIELDS)
    unknown = set(changes) - allowed
    if unknown:
        raise ValidationError(f"cannot change {', '.join(sorted(unknown))} with tenant_update")
    check_limits({k: v for k, v in changes.items() if k in _LIMIT_FIELDS})
    check_share(changes)
    for budget in ("monthly_spend_budget", "end_user_monthly_spend_budget"):
        if budget in changes:
            changes[budget] = check_spend_budget(changes[budget])
    before = {k: getattr(tenant, k) for k in changes}
    for field, value in changes.items():
        setattr(tenant, field, value)
    tenant.save(update_fields=list(changes) or None)
    diff = {k: _audited([before[k], v]) for k, v in changes.items() if before[k] != v}
    if diff:
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action="tenant.update",
            target=tenant,
            details=diff,
        )
        auth_epoch_bump()
    return tenant


@transaction.atomic
def tenant_set_allowed_models(
    *, tenant: Tenant, model_names: Iterable[str], actor: Any = None, actor_label: str | None = None
) -> Tenant:
    """Grant exactly these served models (an empty list grants every model)."""
    models = served_models_named(model_names)
    names = [m.name for m in models]
    tenant.allowed_models.set(models)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="tenant.grant_models",
        target=tenant,
        details={"models": names},
    )
    auth_epoch_bump()
    return tenant


@transaction.atomic
def tenant_rotate_cache_salt(
    *, tenant: Tenant, actor: Any = None, actor_label: str | None = None
) -> Tenant:
    """A new secret salt: the tenant's earlier prefix-cache entries are never hit again."""
    tenant.cache_salt = _new_cache_salt()
    tenant.cache_salt_rotated_at = timezone.now()
    tenant.save(update_fields=["cache_salt", "cache_salt_rotated_at"])
    audit_record(actor=actor, actor_label=actor_label, action="tenant.rotate_salt", target=tenant)
    auth_epoch_bump()
    return tenant


@transaction.atomic
def tenant_get_or_create_playground(*, user: Any) -> Tenant:
    """The private tenant a staff user's playground session runs under (every model; its
    limits are left empty, and access.py fills them from PLAYGROUND_LIMITS for non-superusers)."""
    tenant = Tenant.objects.filter(playground_user=user).first()
    if tenant is not None:
        return tenant
    name = f"Playground: {user.get_username()}"
    tenant = Tenant.objects.create(
        name=name,
        slug=_unique_slug(f"playground-{user.get_username()}"),
        cache_salt=_new_cache_salt(),
        playground_user=user,
    )
    audit_record(actor=user, action="tenant.create_playground", target=tenant)
    catalog_epoch_bump()  # the catalog lists staff playgrounds among every adapter's callers
    return tenant


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once; never stored


def _check_scopes(scopes: Iterable[str]) -> list[str]:
    scopes = sorted(set(scopes))
    unknown = [s for s in scopes if s not in API_SCOPES]
    if unknown:
        raise ValidationError(
            f"unknown scopes {', '.join(unknown)}; known: {', '.join(API_SCOPES)}"
        )
    return scopes


def admin_scope_check(*, tenant: Tenant, scopes: Iterable[str]) -> None:
    """Refuse the ``admin`` scope on a key that no staff user owns: it runs the fleet, so it
    belongs to a person the admin knows (whose key it is: a staff user's own tenant)."""
    if ADMIN_SCOPE in scopes and tenant_staff_owner(tenant=tenant) is None:
        raise ValidationError(
            "the admin scope is only for a staff user's own key "
            "(create_api_key --staff-user NAME --scope admin)"
        )


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str = "default",
    scopes: Iterable[str] = (),
    expires_at: datetime | None = None,
    actor: Any = None,
    actor_label: str | None = None,
) -> CreatedKey:
    """A new key; the returned secret is the only copy (the database keeps a keyed hash)."""
    scopes = _check_scopes(scopes)
    admin_scope_check(tenant=tenant, scopes=scopes)
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError("expires_at is in the past")
    prefix, secret = new_secret()
    while ApiKey.objects.filter(prefix=prefix).exists():  # 32 random bits: rare, not impossible
        prefix, secret = new_secret()
    key = ApiKey.objects.create(
        tenant=tenant,
        name=name or "default",
        prefix=prefix,
        secret_hash=hash_secret(secret),
        scopes=scopes,
        expires_at=expires_at,
    )
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="api_key.create",
        target=key,
        details={"prefix": prefix, "name": key.name, "scopes": scopes},
    )
    # A negative cache entry for this prefix may exist (someone guessed it): drop it.
    auth_epoch_bump()
    return CreatedKey(key=key, secret=secret)


@transaction.atomic
def api_key_revoke(*, key: ApiKey, actor: Any = None, actor_label: str | None = None) -> ApiKey:
    """Revoke a key; every API process refuses it within seconds. Revoking twice is a no-op."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is not None:
        return key
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="api_key.revoke",
        target=key,
        details={"prefix": key.prefix},
    )
    auth_epoch_bump()
    return key


@transaction.atomic
def api_key_set_spend_budget(
    *,
    key: ApiKey,
    monthly_spend_budget: Decimal | None,
    actor: Any = None,
    actor_label: str | None = None,
) -> ApiKey:
    """Set (or clear, with None) the key's own monthly spend budget; API processes apply it
    within seconds."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    budget = check_spend_budget(monthly_spend_budget)
    if key.monthly_spend_budget == budget:
        return key
    before, key.monthly_spend_budget = key.monthly_spend_budget, budget
    key.save(update_fields=["monthly_spend_budget"])
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="api_key.set_spend_budget",
        target=key,
        details={"prefix": key.prefix, "monthly_spend_budget": _audited([before, budget])},
    )
    auth_epoch_bump()
    return key


def last_used_redis_key() -> str:
    return redis_key("auth", "last_used")


def api_key_flush_last_used() -> int:
    """Copy last-use times that API processes left in Redis into the database (periodic job)."""
    client = sync_redis()
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(last_used_redis_key())
    pipe.delete(last_used_redis_key())
    stamps, _ = pipe.execute()
    updated = 0
    for raw_id, raw_ts in stamps.items():
        when = datetime.fromtimestamp(float(raw_ts), tz=UTC)
        updated += (
            ApiKey.objects.filter(pk=int(raw_id))
            .exclude(last_used_at__gte=when)
            .update(last_used_at=when)
        )
    return updated
