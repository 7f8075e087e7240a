"""Security: the secret key, DEBUG, allowed hosts and HTTPS; safe by default.

DEBUG is off unless DJANGO_DEBUG=1. Without DJANGO_SECRET_KEY a random key is generated once
into VAR_DIR/secret_key (mode 0600) and kept. Behind TLS, DJANGO_HTTPS=1 turns on the HTTPS
redirect, secure cookies and HSTS; docs/operations.md lists the production environment that
``manage.py check --deploy`` passes with.
"""

import os
import secrets

from django.core.exceptions import ImproperlyConfigured

from controlplane.core.private_files import read_or_create_private_file
from controlplane.settings.core import VAR_DIR
from controlplane.settings.env import env_bool, env_int, env_list, env_str


def _generated_secret_key() -> str:
    path = VAR_DIR / "secret_key"
    try:
        return read_or_create_private_file(path, lambda: secrets.token_urlsafe(50)).strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"cannot keep a generated secret key in {path} ({exc}); set DJANGO_SECRET_KEY"
        ) from exc


# API keys are stored as HMACs keyed with it: changing it invalidates every API key.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _generated_secret_key()
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["*"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# Served over HTTPS (directly or behind a TLS-terminating proxy).
_https = env_bool("DJANGO_HTTPS", False)
# Off when the proxy redirects plain HTTP itself.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", _https)
# Probes and Prometheus reach pods over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^ready$", r"^metrics$"]
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if _https else 0)
# Both bind more than this site (every subdomain; browsers' built-in preload list): opt in.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# The header a TLS-terminating proxy sets to "https" (e.g. X-Forwarded-Proto); only behind one
# that overwrites it, or clients could claim HTTPS.
_proxy_ssl_header = env_str("DJANGO_SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https") if _proxy_ssl_header else None
)
SILENCED_SYSTEM_CHECKS = env_list("DJANGO_SILENCED_SYSTEM_CHECKS", [])
