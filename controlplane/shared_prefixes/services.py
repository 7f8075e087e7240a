"""Writes on shared prefixes. The admin and ``manage.py declare_shared_prefix`` call these.

Every write leaves an audit entry and bumps the catalog epoch: the API processes cache the
active prefixes in their catalog snapshot (controlplane/catalog/cache.py) and each one drops
it, and the prefix token ids built from it, within about a second.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from controlplane.audit.services import audit_record
from controlplane.common.redis_epoch import catalog_epoch_bump
from controlplane.deployments.selectors import served_models_named
from controlplane.shared_prefixes.models import SharedPrefix

__all__ = [
    "shared_prefix_create",
    "shared_prefix_new_version",
    "shared_prefix_set_models",
    "shared_prefix_update",
]

_CONTENT = ("kind", "text", "messages", "tools")
_EDITABLE = {"description", "is_active", *_CONTENT}


def _next_version(name: str) -> int:
    return (SharedPrefix.objects.filter(name=name).aggregate(v=Max("version"))["v"] or 0) + 1


@transaction.atomic
def shared_prefix_create(
    *,
    name: str,
    kind: str = SharedPrefix.Kind.CHAT,
    text: str = "",
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    model_names: Iterable[str] = (),
    description: str = "",
    is_active: bool = True,
    version: int | None = None,
    actor: Any = None,
    actor_label: str | None = None,
) -> SharedPrefix:
    """Declare a prefix; ``version`` None: one after the name's newest (1 for a new name)."""
    models = served_models_named(model_names)
    prefix = SharedPrefix(
        name=(name or "").strip(),
        version=version if version is not None else _next_version((name or "").strip()),
        kind=kind,
        text=text,
        messages=messages or [],
        tools=tools or [],
        description=description,
        is_active=is_active,
    )
    prefix.full_clean()
    prefix.save()
    prefix.served_models.set(models)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="shared_prefix.create",
        target=prefix,
        details={"kind": kind, "models": [m.name for m in models], "is_active": is_active},
    )
    catalog_epoch_bump()
    return prefix


@transaction.atomic
def shared_prefix_update(
    *, prefix: SharedPrefix, actor: Any = None, actor_label: str | None = None, **changes: Any
) -> SharedPrefix:
    """Change the content, description or activity (keyword names as on the model)."""
    unknown = set(changes) - _EDITABLE
    if unknown:
        raise ValidationError(f"cannot change {', '.join(sorted(unknown))} with this service")
    before = {k: getattr(prefix, k) for k in changes}
    for field, value in changes.items():
        setattr(prefix, field, value)
    prefix.full_clean()
    prefix.save()
    changed = sorted(k for k, v in changes.items() if before[k] != v)
    if changed:
        # Content is audited by field name (it may be long); activity by its values.
        details: dict[str, Any] = {"changed": changed}
        if "is_active" in changed:
            details["is_active"] = prefix.is_active
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action="shared_prefix.update",
            target=prefix,
            details=details,
        )
        catalog_epoch_bump()
    return prefix


@transaction.atomic
def shared_prefix_set_models(
    *,
    prefix: SharedPrefix,
    model_names: Iterable[str],
    actor: Any = None,
    actor_label: str | None = None,
) -> SharedPrefix:
    """Apply the prefix to exactly these served models (an empty list: every model)."""
    models = served_models_named(model_names)
    prefix.served_models.set(models)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="shared_prefix.set_models",
        target=prefix,
        details={"models": [m.name for m in models]},
    )
    catalog_epoch_bump()
    return prefix


@transaction.atomic
def shared_prefix_new_version(
    *, prefix: SharedPrefix, actor: Any = None, actor_label: str | None = None
) -> SharedPrefix:
    """A copy of ``prefix`` as the name's next version, inactive: edit it, then activate it
    (and deactivate the old one once clients have moved)."""
    return shared_prefix_create(
        name=prefix.name,
        description=prefix.description,
        model_names=[m.name for m in prefix.served_models.all()],
        is_active=False,
        actor=actor,
        actor_label=actor_label,
        **{field: getattr(prefix, field) for field in _CONTENT},
    )
