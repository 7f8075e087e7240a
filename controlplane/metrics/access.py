"""Who may read /metrics, and how much: the bearer token, the allowed networks, the port.

- The right ``Authorization: Bearer`` token: every series.
- No Authorization header, from an allowed network (METRICS_ALLOWED_NETWORKS, loopback by
  default): on the API port, the series that name no tenant and no adapter; on the dedicated
  metrics port (METRICS_PORT), every series.
- Anything else: 401 (a wrong token, or none where one would help), 403 (no token configured).

Addresses are trusted only on requests no proxy relayed: behind a reverse proxy on the same
host every client would look like loopback, so a request that carries a forwarding header is
let in by its token alone. Prometheus sends none of those headers.
"""

from __future__ import annotations

import enum
import functools
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

from controlplane.common.private_files import read_or_create_private_file

logger = logging.getLogger(__name__)

# Headers a reverse proxy adds (HTTP header names, any case).
PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


class Exposure(enum.Enum):
    """How much of the exposition a request may read."""

    EVERY_SERIES = "every series"
    WITHOUT_TENANTS = "series without tenant or adapter labels"


class MetricsAccessDenied(Exception):
    """A refused scrape: ``status`` 401 or 403, ``headers`` to send with it."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def metrics_bearer_token() -> str:
    """METRICS_BEARER_TOKEN; unset, the one generated into METRICS_TOKEN_FILE ("" if that
    file cannot be made: then only the allowed networks read /metrics, without tenants)."""
    return settings.METRICS_BEARER_TOKEN or _generated_token(Path(settings.METRICS_TOKEN_FILE))


@functools.lru_cache(maxsize=8)
def _generated_token(path: Path) -> str:
    try:
        return read_or_create_private_file(path, lambda: secrets.token_urlsafe(32)).strip()
    except OSError:
        logger.warning(
            "metrics: cannot keep a generated bearer token in %s; set METRICS_BEARER_TOKEN "
            "(until then per-tenant series are served to nobody)",
            path,
            exc_info=True,
        )
        return ""


def check_metrics_access(
    *,
    authorization: str | None,
    client_host: str | None,
    proxied: bool,
    dedicated_port: bool,
) -> Exposure:
    """What this request may read; raises MetricsAccessDenied when it may read nothing."""
    token = metrics_bearer_token()
    if authorization:
        if token and _bearer_matches(authorization, token):
            return Exposure.EVERY_SERIES
        raise MetricsAccessDenied(
            401,
            "wrong metrics bearer token\n",
            {"WWW-Authenticate": 'Bearer realm="metrics", error="invalid_token"'},
        )
    if not proxied and _in_networks(client_host, settings.METRICS_ALLOWED_NETWORKS):
        return Exposure.EVERY_SERIES if dedicated_port else Exposure.WITHOUT_TENANTS
    if token:
        raise MetricsAccessDenied(
            401,
            "metrics need a bearer token (Authorization: Bearer ...)\n",
            {"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    raise MetricsAccessDenied(403, "metrics are not served to this address\n")


def _bearer_matches(authorization: str, token: str) -> bool:
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def _in_networks(host: str | None, networks: Iterable[str]) -> bool:
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:  # no address (a Unix socket) or not an IP
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # a dual-stack socket reports IPv4 clients this way
    return any(address in ipaddress.ip_network(n, strict=False) for n in networks)
