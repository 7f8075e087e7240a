"""Who may call what: the API's single entry point to keys, grants, salts, limits and usage.

Views call only these functions; the control plane implements the policy behind them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from django.utils import timezone

from controlplane.tenants.models import ApiKey
from controlplane.tenants.services import hash_secret


class AccessError(Exception):
    """Refused: carries the OpenAI error fields and the HTTP status to answer with."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        type: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: one API key of one tenant."""

    key_id: int
    key_prefix: str
    tenant_id: int
    tenant_slug: str
    cache_salt: str
    # None: every served model; otherwise the names this tenant was granted.
    allowed_models: frozenset[str] | None
    scopes: frozenset[str] = field(default_factory=frozenset)


@dataclass
class Admission:
    """A request let in by the limits; ``headers`` go on the response (x-ratelimit-*)."""

    principal: Principal
    model: str
    reserved_tokens: int
    headers: dict[str, str] = field(default_factory=dict)


def _unauthorized(message: str) -> AccessError:
    return AccessError(message, status=401, type="invalid_request_error", code="invalid_api_key")


async def authenticate(authorization: str | None, *, endpoint: str) -> Principal:
    """Resolve ``Authorization: Bearer <key>``; raise AccessError (401/403) when refused."""
    if not authorization or not authorization.startswith("Bearer "):
        raise _unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer sk-...'."
        )
    secret = authorization[len("Bearer ") :].strip()
    key = await (
        ApiKey.objects.select_related("tenant").filter(secret_hash=hash_secret(secret)).afirst()
    )
    now = timezone.now()
    if key is None or key.revoked_at is not None or not key.tenant.is_active:
        raise _unauthorized("Incorrect API key provided.")
    if key.expires_at is not None and key.expires_at <= now:
        raise _unauthorized("This API key has expired.")
    if key.scopes and endpoint not in key.scopes:
        raise AccessError(
            f"This API key may not call {endpoint}.",
            status=403,
            type="invalid_request_error",
            code="insufficient_scope",
        )
    names = [m.name async for m in key.tenant.allowed_models.all()]
    return Principal(
        key_id=key.id,
        key_prefix=key.prefix,
        tenant_id=key.tenant_id,
        tenant_slug=key.tenant.slug,
        cache_salt=key.tenant.cache_salt,
        allowed_models=frozenset(names) if names else None,
        scopes=frozenset(key.scopes or []),
    )


def can_use_model(principal: Principal, model: str) -> bool:
    return principal.allowed_models is None or model in principal.allowed_models


def engine_cache_salt(principal: Principal, client_salt: str | None) -> str:
    """The salt sent to the engine: always bound to the tenant's secret salt.

    A client salt can only split its own tenant's cache further; it never replaces the
    tenant's salt, so knowing another tenant's salt gains nothing.
    """
    material = principal.cache_salt if not client_salt else f"{principal.cache_salt}\0{client_salt}"
    return hashlib.sha256(material.encode()).hexdigest()


async def admit(
    principal: Principal, *, model: str, prompt_tokens: int, max_tokens: int
) -> Admission:
    """Reserve capacity for a request under the tenant's limits (raises AccessError 429)."""
    return Admission(principal=principal, model=model, reserved_tokens=prompt_tokens + max_tokens)


async def finish(
    admission: Admission,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    status: int,
    finish_reason: str | None,
    time_to_first_token: float | None,
    latency: float,
    adapter: str | None = None,
) -> None:
    """Release the reservation and record usage; never blocks the response."""
    return None
