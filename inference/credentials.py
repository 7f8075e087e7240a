"""Credentials off the wire: the ``Authorization`` header, and a WebSocket handshake's header,
``?api_key=`` or staff session cookie, plus the client's address (failed attempts are
throttled per address). What they are worth is the control plane's decision
(controlplane.access.principals); this module only finds them.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings

from controlplane.access.principals import (
    Principal,
    authenticate_secret,
    key_principal,
    staff_principal,
    staff_session_principal,
    unauthorized,
)

__all__ = [
    "ClientAddressMiddleware",
    "Credential",
    "authenticate",
    "authenticate_websocket",
    "authenticate_x_api_key",
    "key_credential",
    "websocket_credential",
]

# The address of the HTTP client being served (set by ClientAddressMiddleware).
_client_address: ContextVar[str | None] = ContextVar("client_address", default=None)


class ClientAddressMiddleware:
    """Keeps ``REMOTE_ADDR`` (Daphne's peer, or the client with --proxy-headers) for the
    request, so that ``authenticate`` can throttle failed keys per address."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        token = _client_address.set(request.META.get("REMOTE_ADDR"))
        try:
            return self.get_response(request)
        finally:
            _client_address.reset(token)

    async def _acall(self, request):
        token = _client_address.set(request.META.get("REMOTE_ADDR"))
        try:
            return await self.get_response(request)
        finally:
            _client_address.reset(token)


def _secret_from_header(authorization: str | None) -> str:
    if not authorization:
        raise unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer sk-...'."
        )
    scheme, _, secret = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise unauthorized("Send the API key as 'Authorization: Bearer sk-...'.")
    return secret.strip()


async def authenticate(
    authorization: str | None, *, endpoint: str, client_address: str | None = None
) -> Principal:
    """Resolve ``Authorization: Bearer <key>``; raise AccessError (401/403, 429 after too many
    failures) when refused. ``client_address``: the HTTP request's by default."""
    return await authenticate_secret(
        _secret_from_header(authorization),
        endpoint=endpoint,
        client_address=client_address or _client_address.get(),
    )


async def authenticate_x_api_key(
    x_api_key: str | None, authorization: str | None, *, endpoint: str
) -> Principal:
    """Anthropic's way to send a key, ``x-api-key: <key>``, or else ``Authorization: Bearer``
    (what ``authenticate`` takes); the same checks and throttling either way."""
    if x_api_key is None:
        if authorization is None:
            raise unauthorized(
                "You didn't provide an API key. Send it in the x-api-key header (or as "
                "'Authorization: Bearer sk-...')."
            )
        return await authenticate(authorization, endpoint=endpoint)
    if not x_api_key.strip():
        raise unauthorized("The x-api-key header is empty; send your API key in it.")
    return await authenticate_secret(
        x_api_key.strip(), endpoint=endpoint, client_address=_client_address.get()
    )


@dataclass(frozen=True)
class Credential:
    """What a WebSocket client presented, kept so that it can be checked again while the
    socket stays open: an API key, or a staff user (a session cookie, or ``scope["user"]``)."""

    secret: str | None = None
    session_key: str | None = None
    user: Any = None
    client_address: str | None = None

    async def authenticate(self, *, endpoint: str) -> Principal:
        """The first check: throttled per address and key prefix when it fails."""
        if self.secret is not None:
            return await authenticate_secret(
                self.secret, endpoint=endpoint, client_address=self.client_address
            )
        return await self.recheck()

    async def recheck(self, *, endpoint: str | None = None) -> Principal:
        """Whether it still stands (a key revoked or expired, a staff user deactivated: 401),
        and may do ``endpoint`` (403). Costs no database query for a cached key."""
        if self.secret is not None:
            return await key_principal(self.secret, endpoint=endpoint)
        principal = await staff_principal(self.user)
        if principal is None and self.session_key:
            principal = await staff_session_principal(self.session_key)
        if principal is None:
            raise unauthorized(
                "This session may not use the playground: sign in to the admin as staff "
                "with the playground permission, or send an API key."
            )
        return principal


def _scope_headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _scope_client_address(scope: dict) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


def key_credential(api_key: object, scope: dict) -> Credential:
    """A key sent in a WebSocket message (``{"type": "auth", "api_key": ...}``)."""
    if not isinstance(api_key, str) or not api_key.strip():
        raise unauthorized('Send the API key as a string: {"type": "auth", "api_key": "sk-..."}.')
    secret = _secret_from_header(f"Bearer {api_key}")
    return Credential(secret=secret, client_address=_scope_client_address(scope))


def websocket_credential(scope: dict) -> Credential:
    """The credential of a WebSocket handshake: ``Authorization: Bearer``, ``?api_key=``, or a
    staff session (Django's session cookie, or ``scope["user"]`` under AuthMiddlewareStack),
    which runs under the staff user's private playground tenant. Raises AccessError 401 when
    there is none."""
    headers = _scope_headers(scope)
    address = _scope_client_address(scope)
    if "authorization" in headers:
        secret = _secret_from_header(headers["authorization"])
        return Credential(secret=secret, client_address=address)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("api_key"):
        return key_credential(query["api_key"][0], scope)
    origin = headers.get("origin")
    if origin and urlsplit(origin).netloc != headers.get("host"):
        # Cookies ride along on cross-site WebSocket handshakes in some browsers: a session is
        # only trusted from a page of this site (keys, above, are not ambient, so any origin).
        raise unauthorized("A staff session is accepted only from this site's own pages.")
    user = scope.get("user")
    morsel = SimpleCookie(headers.get("cookie", "")).get(settings.SESSION_COOKIE_NAME)
    session_key = morsel.value if morsel is not None and morsel.value else None
    if not getattr(user, "is_staff", False) and session_key is None:
        raise unauthorized(
            "Authenticate with 'Authorization: Bearer sk-...', ?api_key=, or a staff session."
        )
    return Credential(session_key=session_key, user=user, client_address=address)


async def authenticate_websocket(scope: dict, *, endpoint: str = "websocket") -> Principal:
    """Authenticate a WebSocket handshake (see ``websocket_credential``); raises AccessError
    401 when refused, 403 when a key's scopes do not include ``endpoint``."""
    return await websocket_credential(scope).authenticate(endpoint=endpoint)
