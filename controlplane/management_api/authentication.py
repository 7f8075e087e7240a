"""Who may call the management API: an API key that lists the ``admin`` scope and belongs to
an active staff user (their own tenant's key; ``create_api_key --staff-user NAME --scope
admin``). A plain tenant key, even one without scopes (which may call every /v1 endpoint),
gets 403; no key or a bad one 401, throttled as on /v1 (access/auth_throttle.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from controlplane.access.principals import AccessError, authenticate_secret, unauthorized
from controlplane.tenants.models import ADMIN_SCOPE
from controlplane.tenants.selectors import api_key_staff_owner


@dataclass(frozen=True)
class AdminCaller:
    user: Any  # the staff user who owns the key: the audit log's actor
    label: str  # "alice (API key deployer, sk-1a2b3c4d…)": which of their keys it was


def _forbidden(message: str) -> AccessError:
    return AccessError(message, status=403, type="invalid_request_error", code="insufficient_scope")


def _bearer(authorization: str | None) -> str:
    scheme, _, secret = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise unauthorized(
            "You didn't provide an API key. Send an admin key as 'Authorization: Bearer sk-...'."
        )
    return secret.strip()


def admin_caller(authorization: str | None, *, client_address: str | None) -> AdminCaller:
    """The caller an ``Authorization`` header stands for; AccessError (401, 403, 429) if none."""
    principal = async_to_sync(authenticate_secret)(
        _bearer(authorization), endpoint=ADMIN_SCOPE, client_address=client_address
    )
    if ADMIN_SCOPE not in principal.scopes:  # no scopes means every /v1 endpoint, not this
        raise _forbidden("This API key may not call the management API: it needs the admin scope.")
    owned = api_key_staff_owner(key_id=principal.key_id)
    if owned is None:
        raise _forbidden("This API key's owner is not an active staff user.")
    key, user = owned
    return AdminCaller(
        user=user, label=f"{user.get_username()} (API key {key.name}, {key.prefix}…)"
    )
