"""Writes on end users: the controls a tenant or an operator sets on one (the admin and the
portal call these), and the mirror of those controls that admission reads in Redis.

Each change is audited, and reaches Redis once its transaction commits; adding or removing
a row also bumps the auth epoch, because a tenant's cached keys carry whether it has any
controls at all (so tenants without limits or controls skip the limiter's round trip).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.audit.services import audit_record
from controlplane.common.redis_clients import sync_redis
from controlplane.common.redis_epoch import auth_epoch_bump
from controlplane.end_users.controls import controls_key, controls_value
from controlplane.end_users.models import MAX_NAME_LENGTH, EndUser
from controlplane.tenants.models import Tenant
from controlplane.tenants.validation import check_spend_budget

__all__ = [
    "end_user_controls_heal",
    "end_user_controls_publish",
    "end_user_remove_controls",
    "end_user_set_controls",
]


def _check_name(name: str) -> str:
    # Kept exactly as the requests send it (no stripping): it is matched byte for byte.
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ValidationError(f"an end user's name has 1 to {MAX_NAME_LENGTH} characters")
    return name


def _publish_one(end_user: EndUser) -> None:
    value = controls_value(
        monthly_spend_budget=end_user.monthly_spend_budget, blocked=end_user.blocked
    )
    key, name = controls_key(end_user.tenant_id), end_user.name
    transaction.on_commit(lambda: sync_redis().hset(key, name, value))


@transaction.atomic
def end_user_set_controls(
    *,
    tenant: Tenant,
    name: str,
    monthly_spend_budget: Decimal | None = None,
    blocked: bool = False,
    note: str = "",
    actor: Any = None,
    actor_label: str | None = None,
) -> EndUser:
    """Set (or change) the controls on one end user of ``tenant``: their own monthly spend
    budget (None: the tenant's budget per end user) and whether they are blocked."""
    name = _check_name(name)
    budget = check_spend_budget(monthly_spend_budget)
    end_user, created = EndUser.objects.select_for_update().get_or_create(tenant=tenant, name=name)
    before = {"monthly_spend_budget": end_user.monthly_spend_budget, "blocked": end_user.blocked}
    end_user.monthly_spend_budget = budget
    end_user.blocked = bool(blocked)
    end_user.note = (note or "")[:200]
    end_user.full_clean()
    end_user.save()
    after = {"monthly_spend_budget": budget, "blocked": end_user.blocked}
    changed = {k: [_text(before[k]), _text(v)] for k, v in after.items() if before[k] != v}
    if created or changed:
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action="end_user.create" if created else "end_user.update",
            target=end_user,
            details={"tenant": tenant.slug, **changed},
        )
    _publish_one(end_user)
    if created:
        auth_epoch_bump()
    return end_user


def _text(value):
    return str(value) if isinstance(value, Decimal) else value


@transaction.atomic
def end_user_remove_controls(
    *, end_user: EndUser, actor: Any = None, actor_label: str | None = None
) -> None:
    """Drop the controls on one end user: the tenant's budget per end user applies again."""
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="end_user.delete",
        target=end_user,
        details={"tenant": end_user.tenant.slug},
    )
    key, name = controls_key(end_user.tenant_id), end_user.name
    end_user.delete()
    transaction.on_commit(lambda: sync_redis().hdel(key, name))
    auth_epoch_bump()


def end_user_controls_publish(*, tenant_id: int) -> int:
    """Rewrite a tenant's controls in Redis from its rows, in one MULTI; returns how many."""
    rows = EndUser.objects.filter(tenant_id=tenant_id).values_list(
        "name", "monthly_spend_budget", "blocked"
    )
    mapping = {
        name: controls_value(monthly_spend_budget=budget, blocked=blocked)
        for name, budget, blocked in rows
    }
    pipe = sync_redis().pipeline(transaction=True)
    pipe.delete(controls_key(tenant_id))
    if mapping:
        pipe.hset(controls_key(tenant_id), mapping=mapping)
    pipe.execute()
    return len(mapping)


def end_user_controls_heal() -> int:
    """Rebuild the controls of every tenant whose hash Redis no longer holds (a restart
    without persistence, an eviction); returns how many tenants were rebuilt."""
    tenant_ids = sorted(set(EndUser.objects.values_list("tenant_id", flat=True)))
    if not tenant_ids:
        return 0
    pipe = sync_redis().pipeline(transaction=False)
    for tenant_id in tenant_ids:
        pipe.exists(controls_key(tenant_id))
    missing = [t for t, held in zip(tenant_ids, pipe.execute(), strict=True) if not held]
    for tenant_id in missing:
        end_user_controls_publish(tenant_id=tenant_id)
    return len(missing)
