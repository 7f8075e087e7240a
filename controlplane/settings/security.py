"""Security: the secret key, DEBUG, allowed hosts and HTTPS; safe by default.

DEBUG is off unless DJANGO_DEBUG=1. Without DJANGO_SECRET_KEY a random key is generated once
into VAR_DIR/secret_key (mode 0600) and kept. Behind TLS, DJANGO_HTTPS=1 turns on the HTTPS
redirect, secure cookies and HSTS; docs/operations.md lists the production environment that
``manage.py check --deploy`` passes with.
"""

import secrets

from django.core.exceptions import ImproperlyConfigured

from controlplane.common.private_files import read_or_create_private_file
from controlplane.settings.core import VAR_DIR
from controlplane.settings.env import env


def _generated_secret_key() -> str:
    path = VAR_DIR / "secret_key"
    try:
        return read_or_create_private_file(path, lambda: secrets.token_urlsafe(50)).strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"cannot keep a generated secret key in {path} ({exc}); set DJANGO_SECRET_KEY"
        ) from exc


# API keys are stored as HMACs keyed with it: changing it invalidates every API key.
SECRET_KEY = env.str("DJANGO_SECRET_KEY", "") or _generated_secret_key()
DEBUG = env.bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", cast=str.strip, default=["*"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", cast=str.strip, default=[])

# Served over HTTPS (directly or behind a TLS-terminating proxy).
_https = env.bool("DJANGO_HTTPS", False)
# Off when the proxy redirects plain HTTP itself.
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", _https)
# Probes and Prometheus reach pods over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^ready$", r"^metrics$"]
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if _https else 0)
# Both bind more than this site (every subdomain; browsers' built-in preload list): opt in.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# The header a TLS-terminating proxy sets to "https" (e.g. X-Forwarded-Proto); only behind one
# that overwrites it, or clients could claim HTTPS.
_proxy_ssl_header = env.str("DJANGO_SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https") if _proxy_ssl_header else None
)
SILENCED_SYSTEM_CHECKS = env.list("DJANGO_SILENCED_SYSTEM_CHECKS", cast=str.strip, default=[])

# Failed authentication (controlplane/access/auth_throttle.py). API keys: after this many
# failures in a window from one client address, or with one key prefix, failures are answered
# 429 with Retry-After (a blocked address's unknown keys never reach the database). Behind a
# proxy, run Daphne with --proxy-headers so that the address is the client's. 0: not counted.
AUTH_FAILURES_PER_ADDRESS = env.int("AUTH_FAILURES_PER_ADDRESS", 20)
AUTH_FAILURES_PER_KEY_PREFIX = env.int("AUTH_FAILURES_PER_KEY_PREFIX", 10)
AUTH_FAILURE_WINDOW_SECONDS = env.int("AUTH_FAILURE_WINDOW_SECONDS", 60)

# Each process re-reads the Redis epochs that say its cached keys or served models changed at
# most this often (controlplane/common/redis_epoch.py): a revocation reaches every process within
# about this interval, for one Redis GET per process per read. (It was 1 s; a loaded 2-core
# runner then took 2.2 s to close a revoked key's WebSocket, and 2.0 s at 0.5 s, 2026-11-27.)
AUTH_EPOCH_CHECK_SECONDS = env.float("AUTH_EPOCH_CHECK_SECONDS", 0.5)

# An open WebSocket checks its key (or staff user) again this often, and before every
# generation it starts: a revoked key's socket is closed within about this plus
# AUTH_EPOCH_CHECK_SECONDS.
WEBSOCKET_AUTH_RECHECK_SECONDS = env.float("WEBSOCKET_AUTH_RECHECK_SECONDS", 0.5)

# The playground tenant of a staff user who is not a superuser (superusers: unlimited), where
# the tenant's own limits are empty. 0: unlimited.
PLAYGROUND_LIMITS = {
    name: env.int(f"PLAYGROUND_{name.upper()}", default) or None
    for name, default in (
        ("requests_per_minute", 60),
        ("tokens_per_minute", 100_000),
        ("max_concurrent_requests", 4),
        ("monthly_token_budget", 0),
    )
}
