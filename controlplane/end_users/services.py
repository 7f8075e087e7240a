"""Writes on end users: the controls a tenant or an operator sets on one (the admin and the
portal call these), and the mirror of those controls that admission reads in Redis.

Each change is audited, and reaches Redis once its transaction commits; adding or removing
a row also bumps the auth epoch, because a tenant's cached keys carry whether it has any
controls at all (so tenants without limits or controls skip the limiter's round trip).
"""

from __future__ import annotations

import logging
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
from engine.redis_outage import TRANSPORT_ERRORS, warn_failure

logger = logging.getLogger(__name__)

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


def _after_commit(write, tenant_id: int) -> None:
    """Run a Redis write once the change has committed; Redis away, the change is saved and
    the heal task copies it within a minute (the caller is not failed for it)."""

    def run() -> None:
        try:
            write(sync_redis())
        except TRANSPORT_ERRORS as exc:
            warn_failure(logger, exc, "end-user controls of tenant %s not copied yet", tenant_id)

    transaction.on_commit(run)


def _publish_one(end_user: EndUser) -> None:
    value = controls_value(
        monthly_spend_budget=end_user.monthly_spend_budget, blocked=end_user.blocked
    )
    key, name = controls_key(end_user.tenant_id), end_user.name
    _after_commit(lambda client: client.hset(key, name, value), end_user.tenant_id)


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
    key, name, tenant_id = controls_key(end_user.tenant_id), end_user.name, end_user.tenant_id
    end_user.delete()
    _after_commit(lambda client: client.hdel(key, name), tenant_id)
    auth_epoch_bump()


def _mapping(tenant_id: int) -> dict[str, str]:
    rows = EndUser.objects.filter(tenant_id=tenant_id).values_list(
        "name", "monthly_spend_budget", "blocked"
    )
    return {
        name: controls_value(monthly_spend_budget=budget, blocked=blocked)
        for name, budget, blocked in rows
    }


def end_user_controls_publish(*, tenant_id: int) -> int:
    """Rewrite a tenant's controls in Redis from its rows, in one MULTI; returns how many."""
    return _publish(tenant_id, _mapping(tenant_id))


def _publish(tenant_id: int, mapping: dict[str, str]) -> int:
    pipe = sync_redis().pipeline(transaction=True)
    pipe.delete(controls_key(tenant_id))
    if mapping:
        pipe.hset(controls_key(tenant_id), mapping=mapping)
    pipe.execute()
    return len(mapping)


def end_user_controls_heal() -> int:
    """Rewrite every tenant's controls from the rows: what Redis lost (a restart without
    persistence, an eviction) or missed (a change made while it was away) is right again.
    Returns how many tenants' copies differed."""
    tenant_ids = sorted(set(EndUser.objects.values_list("tenant_id", flat=True)))
    client = sync_redis()
    differed = 0
    for tenant_id in tenant_ids:
        mapping = _mapping(tenant_id)
        if client.hgetall(controls_key(tenant_id)) != _encoded(mapping):
            differed += 1
            _publish(tenant_id, mapping)
    return differed


def _encoded(mapping: dict[str, str]) -> dict[bytes, bytes]:
    return {name.encode(): value.encode() for name, value in mapping.items()}
