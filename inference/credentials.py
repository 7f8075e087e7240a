"""Credentials off the wire: the ``Authorization`` header, and a WebSocket handshake's header,
``?api_key=`` or staff session cookie. What they are worth is the control plane's decision
(controlplane.tenants.access); this module only finds them.
"""

from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

from django.conf import settings

from controlplane.tenants.access import (
    Principal,
    authenticate_secret,
    staff_principal,
    staff_session_principal,
    unauthorized,
)

__all__ = ["authenticate", "authenticate_websocket"]


def _secret_from_header(authorization: str | None) -> str:
    if not authorization:
        raise unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer sk-...'."
        )
    scheme, _, secret = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise unauthorized("Send the API key as 'Authorization: Bearer sk-...'.")
    return secret.strip()


async def authenticate(authorization: str | None, *, endpoint: str) -> Principal:
    """Resolve ``Authorization: Bearer <key>``; raise AccessError (401/403) when refused."""
    return await authenticate_secret(_secret_from_header(authorization), endpoint=endpoint)


def _scope_headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


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
        raise unauthorized("A staff session is accepted only from this site's own pages.")
    principal = await staff_principal(scope.get("user"))
    if principal is None:
        morsel = SimpleCookie(headers.get("cookie", "")).get(settings.SESSION_COOKIE_NAME)
        if morsel is not None and morsel.value:
            principal = await staff_session_principal(morsel.value)
    if principal is None:
        raise unauthorized(
            "Authenticate with 'Authorization: Bearer sk-...', ?api_key=, or a staff session."
        )
    return principal
