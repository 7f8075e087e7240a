"""Who may read /metrics: a bearer token, the networks let in without it, a dedicated port.

Per-tenant series (and adapter names) need the token, or the dedicated port; the allowed
networks get the rest on the API port. docs/metrics.md ("Access") explains the choice.
"""

import ipaddress

from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.core import VAR_DIR
from controlplane.settings.env import env

# Prometheus sends it as `Authorization: Bearer ...`. Unset: the API process generates one
# into METRICS_TOKEN_FILE (mode 0600) when it starts, for a Prometheus on the same host.
METRICS_BEARER_TOKEN = env.str("METRICS_BEARER_TOKEN", "")
METRICS_TOKEN_FILE = VAR_DIR / "metrics_token"


def _networks(name: str, default: list[str]) -> list[str]:
    values = env.list(name, cast=str.strip, default=default)
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {value!r} is not a network ({exc})") from exc
    return values


# Clients that may read /metrics without the token (CIDRs, comma separated; empty: none).
METRICS_ALLOWED_NETWORKS = _networks("METRICS_ALLOWED_NETWORKS", ["127.0.0.0/8", "::1/128"])
# Set: every API process also serves /metrics on this port (0: off), every series to the
# allowed networks, since no public proxy leads there.
METRICS_PORT = env.int("METRICS_PORT", 0)
METRICS_ADDRESS = env.str("METRICS_ADDRESS", "127.0.0.1")
