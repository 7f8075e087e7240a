"""Who may call what: the API's single entry point to keys, grants, salts, limits and usage.

Views call only these functions; the control plane implements the policy behind them:
keys are resolved through a per-process cache that a Redis epoch invalidates within a second
(controlplane.tenants.keycache), limits are atomic Lua scripts (controlplane.tenants.ratelimit),
and usage is queued in Redis for a batch writer (controlplane.usage). In steady state a request
waits on one Redis round trip (admission; none when the tenant is unlimited); the round trip at
finish runs in the background.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from importlib import import_module
from urllib.parse import parse_qs, urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
from django.utils.crypto import constant_time_compare

from controlplane.tenants.key_secrets import prefix_of, secret_matches
from controlplane.tenants.keycache import key_cache
from controlplane.tenants.ratelimit import Limits, RateLimiter, ratelimit_headers
from controlplane.tenants.redis_clients import async_redis
from controlplane.tenants.selectors import KeyRecord, key_record_for
from controlplane.tenants.services import last_used_redis_key, tenant_get_or_create_playground
from controlplane.usage.events import UsageEvent, encode_event, usage_queue_key
from inference.api_error import ApiError

logger = logging.getLogger(__name__)

__all__ = [
    "AccessError",
    "Admission",
    "Principal",
    "admit",
    "authenticate",
    "authenticate_websocket",
    "can_use_model",
    "engine_cache_salt",
    "finish",
    "finish_pending",
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

    @property
    def is_authenticated(self) -> bool:  # DRF's permission classes ask request.user this
        return True

    def __repr__(self) -> str:  # never print the salt into logs
        return f"Principal(key={self.key_prefix!r}, tenant={self.tenant_slug!r})"


@dataclass
class Admission:
    """A request let in by the limits; ``headers`` go on the response (x-ratelimit-*)."""

    principal: Principal
    model: str
    reserved_tokens: int
    headers: dict[str, str] = field(default_factory=dict)
    request_id: str = ""
    started_at: float = 0.0  # time.monotonic() at admission
    limited: bool = False  # whether a reservation is held in Redis
    finished: bool = False


# Authentication ------------------------------------------------------------------------------

_LAST_USED_PUSH_SECONDS = 30.0
_last_used_pushed: dict[int, float] = {}
# Compared against when the prefix is unknown, so both paths do the same hashing work.
_DUMMY_HASH = "0" * 64


def _unauthorized(message: str) -> AccessError:
    return AccessError(message, status=401, type="invalid_request_error", code="invalid_api_key")


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
        ),
    )


def _secret_from_header(authorization: str | None) -> str:
    if not authorization:
        raise _unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer sk-...'."
        )
    scheme, _, secret = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise _unauthorized("Send the API key as 'Authorization: Bearer sk-...'.")
    return secret.strip()


def check_key(record: KeyRecord | None, secret: str, *, endpoint: str) -> Principal:
    """The policy on a loaded key record: raises AccessError (401/403) when refused."""
    stored = record.secret_hash if record is not None else _DUMMY_HASH
    if not secret_matches(secret, stored) or record is None:
        raise _unauthorized(f"Incorrect API key provided: {_masked(secret)}.")
    if record.revoked:
        raise _unauthorized("This API key has been revoked.")
    if not record.tenant_active:
        raise _unauthorized("This API key's account is disabled.")
    if record.expires_at is not None and record.expires_at <= time.time():
        raise _unauthorized("This API key has expired.")
    if not _scope_allows(record.scopes, endpoint):
        raise AccessError(
            f"This API key may not call {endpoint}.",
            status=403,
            type="invalid_request_error",
            code="insufficient_scope",
        )
    return _principal(record)


def _last_used_due(key_id: int) -> bool:
    now = time.monotonic()
    if now - _last_used_pushed.get(key_id, float("-inf")) < _LAST_USED_PUSH_SECONDS:
        return False
    _last_used_pushed[key_id] = now
    return True


async def authenticate(authorization: str | None, *, endpoint: str) -> Principal:
    """Resolve ``Authorization: Bearer <key>``; raise AccessError (401/403) when refused."""
    secret = _secret_from_header(authorization)
    prefix = prefix_of(secret)
    record = await key_cache.aget(prefix) if prefix else None
    principal = check_key(record, secret, endpoint=endpoint)
    # Last use reaches Redis at most every 30 s per key and process; a job copies it to the DB.
    if _last_used_due(principal.key_id):
        try:
            await async_redis().hset(last_used_redis_key(), principal.key_id, int(time.time()))
        except Exception:
            logger.warning("could not record last use of %s", principal.key_prefix, exc_info=True)
    return principal


def authenticate_sync(authorization: str | None, *, endpoint: str) -> Principal:
    """``authenticate`` for synchronous callers (DRF's authentication classes)."""
    secret = _secret_from_header(authorization)
    prefix = prefix_of(secret)
    record = key_cache.get(prefix) if prefix else None
    return check_key(record, secret, endpoint=endpoint)


def can_use_model(principal: Principal, model: str) -> bool:
    return principal.allowed_models is None or model in principal.allowed_models


def engine_cache_salt(principal: Principal, client_salt: str | None) -> str:
    """The salt sent to the engine: always bound to the tenant's secret salt.

    A client salt can only split its own tenant's cache further; it never replaces the
    tenant's salt, so knowing another tenant's salt gains nothing.
    """
    material = principal.cache_salt if not client_salt else f"{principal.cache_salt}\0{client_salt}"
    return hashlib.sha256(material.encode()).hexdigest()


# WebSocket -----------------------------------------------------------------------------------


def _scope_headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _staff_user_from_session(session_key: str):
    """The staff user a session cookie belongs to, checked as Django's auth does, else None."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user_id = store.get(SESSION_KEY)
    backend_path = store.get(BACKEND_SESSION_KEY)
    if user_id is None or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(user_id)
    if user is None or not user.is_active or not user.is_staff:
        return None
    if not constant_time_compare(store.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()):
        return None  # the password changed since this session logged in
    return user


def _playground_record(user) -> KeyRecord:
    return key_record_for(None, tenant_get_or_create_playground(user=user))


async def authenticate_websocket(scope: dict, *, endpoint: str = "playground") -> Principal:
    """Authenticate a WebSocket handshake: ``Authorization: Bearer``, ``?api_key=``, or a staff
    session (Django's session cookie, or ``scope["user"]`` under AuthMiddlewareStack), which
    runs under the staff user's private playground tenant. Raises AccessError 401 otherwise.

    A key sent in the first message instead is checked with
    ``authenticate("Bearer " + key, endpoint=...)``.
    """
    headers = _scope_headers(scope)
    if "authorization" in headers:
        return await authenticate(headers["authorization"], endpoint=endpoint)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("api_key"):
        return await authenticate(f"Bearer {query['api_key'][0]}", endpoint=endpoint)
    origin = headers.get("origin")
    if origin and urlsplit(origin).netloc != headers.get("host"):
        # Cookies ride along on cross-site WebSocket handshakes in some browsers: a session is
        # only trusted from a page of this site (keys, above, are not ambient, so any origin).
        raise _unauthorized("A staff session is accepted only from this site's own pages.")
    user = scope.get("user")
    if not (user is not None and getattr(user, "is_staff", False) and user.is_active):
        user = None
        cookie = SimpleCookie(headers.get("cookie", ""))
        morsel = cookie.get(settings.SESSION_COOKIE_NAME)
        if morsel is not None and morsel.value:
            user = await sync_to_async(_staff_user_from_session)(morsel.value)
    if user is None:
        raise _unauthorized(
            "Authenticate with 'Authorization: Bearer sk-...', ?api_key=, or a staff session."
        )
    record = await sync_to_async(_playground_record)(user)
    return _principal(record)


# Limits and usage ----------------------------------------------------------------------------

_limiter = RateLimiter()


def _rate_limited(principal: Principal, model: str, decision, headers: dict) -> AccessError:
    limits = principal.limits
    retry = max(1, math.ceil(decision.retry_after_s))
    headers = {**headers, "retry-after": str(retry)}
    if decision.reason == "budget":
        return AccessError(
            "You exceeded your monthly token budget; contact your administrator.",
            status=429,
            type="insufficient_quota",
            code="insufficient_quota",
            headers={k: v for k, v in headers.items() if k != "retry-after"},
        )
    if decision.reason == "concurrency":
        message = (
            f"Too many concurrent requests for {model}: limit "
            f"{limits.max_concurrent_requests}. Retry when one finishes."
        )
        kind = "requests"
    elif decision.reason == "requests":
        message = (
            f"Rate limit reached for {model} on requests per min (RPM): Limit "
            f"{limits.requests_per_minute}. Please try again in {retry}s."
        )
        kind = "requests"
    elif decision.reason == "too_large":
        message = (
            f"Request too large for {model} on tokens per min (TPM): Limit "
            f"{limits.tokens_per_minute}. Lower the prompt or max_tokens."
        )
        kind = "tokens"
        headers.pop("retry-after")  # waiting would not help
    else:
        message = (
            f"Rate limit reached for {model} on tokens per min (TPM): Limit "
            f"{limits.tokens_per_minute}. Please try again in {retry}s."
        )
        kind = "tokens"
    return AccessError(message, status=429, type=kind, code="rate_limit_exceeded", headers=headers)


async def admit(
    principal: Principal, *, model: str, prompt_tokens: int, max_tokens: int
) -> Admission:
    """Reserve capacity for a request under the tenant's limits (raises AccessError 429).

    Tokens reserved: ``prompt_tokens + max_tokens``; ``finish`` corrects them to the real count.
    """
    max_tokens = max_tokens or 0  # None: nothing reserved beyond the prompt; finish corrects
    if prompt_tokens < 0 or max_tokens < 0:
        raise AccessError(
            "prompt_tokens and max_tokens must not be negative",
            status=400,
            type="invalid_request_error",
        )
    reserved = int(prompt_tokens) + int(max_tokens)
    admission = Admission(
        principal=principal,
        model=model,
        reserved_tokens=reserved,
        request_id=os.urandom(12).hex(),
        started_at=time.monotonic(),
    )
    if principal.limits.unlimited:
        return admission
    try:
        decision = await _limiter.acquire(
            async_redis(),
            tenant_id=principal.tenant_id,
            limits=principal.limits,
            cost=reserved,
            ticket=admission.request_id,
        )
    except Exception as exc:
        logger.exception("rate limiter unavailable")
        raise AccessError(
            "The rate limiter is unavailable; try again shortly.",
            status=503,
            type="server_error",
            code="service_unavailable",
            headers={"retry-after": "1"},
        ) from exc
    headers = ratelimit_headers(principal.limits, decision)
    if not decision.admitted:
        raise _rate_limited(principal, model, decision, headers)
    admission.headers = headers
    admission.limited = True
    return admission


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
    """Release the reservation and queue the usage record, without making the caller wait.

    The Redis write (one round trip) runs as a background task, so no response waits on usage
    accounting; ``finish_pending`` waits for those still in flight. Never raises. Calling it
    twice for one admission does nothing the second time.
    """
    if admission.finished:
        return
    admission.finished = True
    principal = admission.principal
    event = UsageEvent(
        finished_at=time.time(),
        request_id=admission.request_id,
        tenant_id=principal.tenant_id,
        key_id=principal.key_id,
        key_prefix=principal.key_prefix,
        model=admission.model,
        adapter=adapter or "",
        prompt_tokens=int(prompt_tokens),
        completion_tokens=int(completion_tokens),
        cached_tokens=int(cached_tokens),
        time_to_first_token=time_to_first_token,
        latency=float(latency),
        status=int(status),
        finish_reason=finish_reason or "",
    )
    used = int(prompt_tokens) + int(completion_tokens)
    task = asyncio.get_running_loop().create_task(_record(admission, event, used))
    _pending.add(task)  # a strong reference until done: the loop keeps only weak ones
    task.add_done_callback(_pending.discard)


_pending: set[asyncio.Task] = set()


async def _record(admission: Admission, event: UsageEvent, used: int) -> None:
    principal = admission.principal
    try:
        pipe = async_redis().pipeline(transaction=False)
        if admission.limited:
            _limiter.release_into(
                pipe,
                tenant_id=principal.tenant_id,
                limits=principal.limits,
                reserved=admission.reserved_tokens,
                used=used,
                ticket=admission.request_id,
            )
        pipe.rpush(usage_queue_key(), encode_event(event))
        await pipe.execute()
    except Exception:
        logger.exception("could not record usage of request %s", admission.request_id)


async def finish_pending() -> None:
    """Wait until every ``finish`` of this event loop has reached Redis (shutdown, tests)."""
    loop = asyncio.get_running_loop()
    mine = [t for t in _pending if t.get_loop() is loop]
    if mine:
        await asyncio.gather(*mine, return_exceptions=True)
