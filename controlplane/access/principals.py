"""Who is calling: API keys and staff sessions resolved to a Principal, and what it may use.

The API parses credentials off the wire (inference/credentials.py) and asks here. Keys are
resolved through a per-process cache that a Redis epoch invalidates within a second
(keycache.py), so in steady state checking a key costs no database query and no round trip.
Failed attempts are throttled per client address and key prefix (auth_throttle.py). A staff
session runs under the user's private playground tenant, for superusers and staff granted
``tenants.use_playground``, with ``PLAYGROUND_LIMITS`` unless the user is a superuser. Limits
and usage live beside this, in admission.py.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields, replace
from importlib import import_module

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.utils.crypto import constant_time_compare

from controlplane.access.auth_throttle import api_auth_throttle
from controlplane.access.keycache import key_cache
from controlplane.access.ratelimit import Limits
from controlplane.common.api_error import ApiError
from controlplane.common.redis_clients import async_redis
from controlplane.tenants.key_secrets import prefix_of, secret_matches
from controlplane.tenants.selectors import KeyRecord, key_record_for
from controlplane.tenants.services import last_used_redis_key, tenant_get_or_create_playground
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)

__all__ = [
    "AccessError",
    "Principal",
    "authenticate_secret",
    "can_use_model",
    "check_key",
    "engine_cache_salt",
    "key_principal",
    "may_use_playground",
    "staff_principal",
    "staff_session_principal",
    "stored_key_principal",
    "unauthorized",
]


class AccessError(ApiError):
    """Refused by the access policy (401, 403, 429): an ApiError whose status and type the
    caller always states."""

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
        super().__init__(message, status=status, type=type, code=code, param=param, headers=headers)
        # Set on a refusal by the tenant's limits (admission.py): the limiter's reason.
        self.limit_reason = ""


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: one API key of one tenant (key_id 0: a staff session)."""

    key_id: int
    key_prefix: str
    tenant_id: int
    tenant_slug: str
    cache_salt: str
    # None: every served model; otherwise the names this tenant was granted.
    allowed_models: frozenset[str] | None
    scopes: frozenset[str] = field(default_factory=frozenset)
    limits: Limits = field(default_factory=Limits)
    # Fair share in the engines (Tenant.share_weight, Tenant.service_class).
    share_weight: int = 1
    service_class: str = "interactive"
    # Tenant.zero_data_retention: nothing of its requests is kept on the server.
    zero_data_retention: bool = False

    @property
    def engine_tenant(self) -> str:
        """The tenant as the engines know it: an opaque id, never its name or cache salt."""
        return f"t{self.tenant_id}"

    def __repr__(self) -> str:  # never print the salt into logs
        return f"Principal(key={self.key_prefix!r}, tenant={self.tenant_slug!r})"


def unauthorized(message: str) -> AccessError:
    return AccessError(message, status=401, type="invalid_request_error", code="invalid_api_key")


def _too_many_failures(retry_after: float) -> AccessError:
    seconds = max(1, math.ceil(retry_after))
    return AccessError(
        f"Too many failed authentication attempts. Please try again in {seconds}s.",
        status=429,
        type="requests",
        code="rate_limit_exceeded",
        headers={"retry-after": str(seconds)},
    )


# Keys ---------------------------------------------------------------------------------------

_LAST_USED_PUSH_SECONDS = 30.0
_last_used_pushed: dict[int, float] = {}
# Compared against when the prefix is unknown, so both paths do the same hashing work.
_DUMMY_HASH = "0" * 64


def _masked(secret: str) -> str:
    return f"{secret[:6]}****{secret[-4:]}" if len(secret) > 12 else "****"


def _scope_name(endpoint: str) -> str:
    """ "/v1/chat/completions" and "chat.completions" both name the scope "chat.completions"."""
    name = endpoint.strip().strip("/")
    name = name.removeprefix("v1/")
    return name.replace("/", ".")


def _scope_allows(scopes: frozenset[str], endpoint: str) -> bool:
    if not scopes:
        return True
    name = _scope_name(endpoint)
    return any(name == s or name.startswith(s + ".") for s in scopes)


def _principal(record: KeyRecord) -> Principal:
    return Principal(
        key_id=record.key_id,
        key_prefix=record.prefix,
        tenant_id=record.tenant_id,
        tenant_slug=record.tenant_slug,
        cache_salt=record.cache_salt,
        allowed_models=record.allowed_models,
        scopes=record.scopes,
        limits=Limits(
            requests_per_minute=record.requests_per_minute,
            tokens_per_minute=record.tokens_per_minute,
            max_concurrent_requests=record.max_concurrent_requests,
            monthly_token_budget=record.monthly_token_budget,
            monthly_spend_budget=record.monthly_spend_budget,
            key_monthly_spend_budget=record.key_monthly_spend_budget,
            end_user_spend_budget=record.end_user_spend_budget,
            end_user_controls=record.end_user_controls,
        ),
        share_weight=record.share_weight,
        service_class=record.service_class,
        zero_data_retention=record.zero_data_retention,
    )


def check_key(record: KeyRecord | None, secret: str, *, endpoint: str | None) -> Principal:
    """The policy on a loaded key record: raises AccessError (401/403) when refused.
    ``endpoint`` None: whether the key is still good, whatever its scopes."""
    stored = record.secret_hash if record is not None else _DUMMY_HASH
    if not secret_matches(secret, stored) or record is None:
        raise unauthorized(f"Incorrect API key provided: {_masked(secret)}.")
    if record.revoked:
        raise unauthorized("This API key has been revoked.")
    if not record.tenant_active:
        raise unauthorized("This API key's account is disabled.")
    if record.expires_at is not None and record.expires_at <= time.time():
        raise unauthorized("This API key has expired.")
    if endpoint is not None:
        _require_scope(record, endpoint)
    return _principal(record)


def stored_key_principal(record: KeyRecord | None, *, endpoint: str) -> Principal:
    """The policy on a key whose secret was checked earlier, when the caller has gone (the Batch
    API runs each line under the key that created the batch): a key revoked, expired or of a
    disabled tenant since then, or without the endpoint's scope, is refused (AccessError)."""
    if record is None or record.revoked:
        raise unauthorized("The API key that created this batch has been revoked.")
    if not record.tenant_active:
        raise unauthorized("This API key's account is disabled.")
    if record.expires_at is not None and record.expires_at <= time.time():
        raise unauthorized("The API key that created this batch has expired.")
    _require_scope(record, endpoint)
    return _principal(record)


def _require_scope(record: KeyRecord, endpoint: str) -> None:
    if not _scope_allows(record.scopes, endpoint):
        raise AccessError(
            f"This API key may not call {endpoint}.",
            status=403,
            type="invalid_request_error",
            code="insufficient_scope",
        )


def _last_used_due(key_id: int) -> bool:
    now = time.monotonic()
    if now - _last_used_pushed.get(key_id, float("-inf")) < _LAST_USED_PUSH_SECONDS:
        return False
    _last_used_pushed[key_id] = now
    return True


async def authenticate_secret(
    secret: str, *, endpoint: str, client_address: str | None = None
) -> Principal:
    """The Principal an API key secret stands for; raises AccessError when refused: 401/403,
    or 429 once the client address or key prefix has failed too often (auth_throttle.py)."""

    async def refuse_if_blocked() -> None:  # only before a lookup that reaches the database
        retry = await api_auth_throttle.blocked_for(client_address)
        if retry > 0:
            raise _too_many_failures(retry)

    try:
        return await key_principal(secret, endpoint=endpoint, before_load=refuse_if_blocked)
    except AccessError as exc:
        if exc.status != 401:
            raise
        retry = await api_auth_throttle.failed(client_address, prefix_of(secret))
        if retry > 0:
            raise _too_many_failures(retry) from None
        raise


async def key_principal(
    secret: str,
    *,
    endpoint: str | None = None,
    before_load: Callable[[], Awaitable[None]] | None = None,
) -> Principal:
    """The key policy alone, unthrottled: for checking again a key that authenticated before
    (an open WebSocket does, every half second). ``endpoint`` None: any scope.
    ``before_load``: awaited before the key is read from the database (keycache.py)."""
    prefix = prefix_of(secret)
    record = await key_cache.aget(prefix, before_load=before_load) if prefix else None
    principal = check_key(record, secret, endpoint=endpoint)
    # Last use reaches Redis at most every 30 s per key and process; a job copies it to the DB.
    if _last_used_due(principal.key_id):
        try:
            await async_redis().hset(last_used_redis_key(), principal.key_id, int(time.time()))
        except Exception as exc:
            warn_failure(logger, exc, "could not record last use of %s", principal.key_prefix)
    return principal


def can_use_model(principal: Principal, model: str) -> bool:
    return principal.allowed_models is None or model in principal.allowed_models


def engine_cache_salt(principal: Principal, client_salt: str | None) -> str:
    """The salt sent to the engine: always bound to the tenant's secret salt.

    A client salt can only split its own tenant's cache further; it never replaces the
    tenant's salt, so knowing another tenant's salt gains nothing.
    """
    material = principal.cache_salt if not client_salt else f"{principal.cache_salt}\0{client_salt}"
    return hashlib.sha256(material.encode()).hexdigest()


# Staff sessions -----------------------------------------------------------------------------

PLAYGROUND_PERMISSION = "tenants.use_playground"
_LIMIT_FIELDS = tuple(f.name for f in fields(Limits))  # the tenant's limit columns


def may_use_playground(user) -> bool:
    """Active staff granted ``tenants.use_playground`` (superusers hold every permission)."""
    return bool(
        user is not None
        and user.is_active
        and user.is_staff
        and user.has_perm(PLAYGROUND_PERMISSION)
    )


def _staff_user_from_session(session_key: str):
    """The user a session cookie belongs to, checked as Django's auth does, else None."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user_id = store.get(SESSION_KEY)
    backend_path = store.get(BACKEND_SESSION_KEY)
    if user_id is None or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(user_id)
    if user is None:
        return None
    if not constant_time_compare(store.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()):
        return None  # the password changed since this session logged in
    return user


def _with_playground_limits(record: KeyRecord) -> KeyRecord:
    """The playground tenant's own limits where set, else the configured PLAYGROUND_LIMITS."""
    defaults = getattr(settings, "PLAYGROUND_LIMITS", {})
    limits = {name: getattr(record, name) for name in _LIMIT_FIELDS}
    return replace(
        record,
        **{name: defaults.get(name) if value is None else value for name, value in limits.items()},
    )


def _playground_record(user) -> KeyRecord | None:
    """The record a user's playground runs under, or None when they may not use one."""
    if not may_use_playground(user):
        return None
    record = key_record_for(None, tenant_get_or_create_playground(user=user))
    return record if user.is_superuser else _with_playground_limits(record)


def _current_user(user):
    """The user's row as it is now: a socket keeps its user object while admins edit the row."""
    return get_user_model()._default_manager.filter(pk=user.pk).first()


async def staff_principal(user) -> Principal | None:
    """The Principal of ``user``'s private playground tenant, if they may use one; else None."""
    if user is None or not getattr(user, "is_staff", False) or user.pk is None:
        return None
    record = await sync_to_async(lambda: _playground_record(_current_user(user)))()
    return None if record is None else _principal(record)


async def staff_session_principal(session_key: str) -> Principal | None:
    """The playground Principal of the user a session cookie belongs to, else None."""
    record = await sync_to_async(
        lambda: _playground_record(_staff_user_from_session(session_key))
    )()
    return None if record is None else _principal(record)
