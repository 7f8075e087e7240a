"""Single sign-on through OpenID Connect, on Authlib's Django client.

Authlib reads the provider's discovery document, sends the authorization-code request with
PKCE (S256), a state and a nonce kept in the session, exchanges the code, and validates the
ID token: its signature against the provider's published keys (JWKS), issuer, audience (our
client id), expiry and nonce. What the platform adds is which provider, and which person:
``controlplane.portal.services.sso_user_for_claims``.
"""

from __future__ import annotations

import time

from authlib.integrations.base_client import OAuthError
from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from controlplane.portal.models import IdentityProvider

__all__ = ["OAuthError", "sso_begin", "sso_claims"]

SCOPES = "openid email profile"

# One client per provider configuration and process: it keeps the discovery document and
# the signing keys it fetched (refetched when a token names a key it does not know). An hour
# old, it is made again, so that a changed provider is read afresh.
_CLIENT_MAX_AGE = 3600.0
_clients: dict[tuple, tuple[float, DjangoOAuth2App]] = {}


def _client(provider: IdentityProvider) -> DjangoOAuth2App:
    config = (provider.pk, provider.issuer, provider.client_id, provider.client_secret)
    made = _clients.get(config)
    if made is not None and time.monotonic() - made[0] < _CLIENT_MAX_AGE:
        return made[1]
    client = OAuth().register(
        name=f"idp-{provider.pk}",
        client_id=provider.client_id,
        client_secret=provider.client_secret or None,
        server_metadata_url=provider.discovery_url,
        client_kwargs={
            "scope": SCOPES,
            "code_challenge_method": "S256",
            "default_timeout": settings.PORTAL_OIDC_TIMEOUT_SECONDS,
        },
    )
    _clients[config] = (time.monotonic(), client)
    return client


def sso_begin(request: HttpRequest, provider: IdentityProvider, redirect_uri: str) -> HttpResponse:
    """The redirect to the provider's authorization endpoint (state, nonce and PKCE verifier
    kept in the session for the callback)."""
    return _client(provider).authorize_redirect(request, redirect_uri)


def sso_claims(request: HttpRequest, provider: IdentityProvider) -> dict:
    """The validated ID token's claims of the provider's callback (raises OAuthError: a
    refused or forged callback, a state that is not this session's, a bad token)."""
    token = _client(provider).authorize_access_token(
        request,
        claims_options={
            # Providers differ on a trailing slash; the discovery document has it either way.
            "iss": {
                "essential": True,
                "values": sorted({provider.issuer, provider.issuer.rstrip("/")}),
            },
            "sub": {"essential": True},
        },
    )
    claims = token.get("userinfo")
    if not claims:  # no ID token (or no nonce to check it with): nothing vouched for
        raise OAuthError(error="missing_id_token", description="the provider sent no ID token")
    return dict(claims)
