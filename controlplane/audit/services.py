"""Writing the audit log. Every service that changes tenants, keys or adapters calls this."""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.db import models

from controlplane.audit.models import AuditEvent


def audit_record(
    *,
    actor: Any = None,
    action: str,
    target: models.Model,
    details: dict[str, Any] | None = None,
    actor_label: str | None = None,
) -> AuditEvent:
    """Append one event. ``actor`` is a user (or None: ``actor_label`` says who, e.g. a command)."""
    user = actor if getattr(actor, "pk", None) is not None else None
    label = actor_label or (user.get_username() if user is not None else "system")
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label[:200],
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk or ""),
        target_repr=str(target)[:300],
        details=details or {},
    )


def shell_actor(command: str) -> str:
    """Who ran a management command, for the audit log: ``manage.py deploy (alice)``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (some containers)
        user = f"uid {os.getuid()}"
    return f"manage.py {command} ({user})"
