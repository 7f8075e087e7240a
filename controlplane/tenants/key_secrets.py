"""API key secrets: their format, the keyed hash stored instead of them, constant-time checks."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings

KEY_PREFIX_LEN = 8  # random hex characters after "sk-" that stay visible in lists and logs
_PREFIX_TOTAL = len("sk-") + KEY_PREFIX_LEN


def new_secret() -> tuple[str, str]:
    """A fresh ``(prefix, secret)``; the secret starts with the prefix."""
    prefix = "sk-" + secrets.token_hex(KEY_PREFIX_LEN // 2)
    return prefix, prefix + secrets.token_urlsafe(32)


def prefix_of(secret: str) -> str | None:
    """The visible prefix of a well-formed secret, or None for anything else."""
    if len(secret) <= _PREFIX_TOTAL or not secret.startswith("sk-"):
        return None
    return secret[:_PREFIX_TOTAL]


def hash_secret(secret: str) -> str:
    """Keyed hash of a secret: a leaked database alone does not let anyone forge a key.

    Keyed with ``API_KEY_HASH_KEY`` (default: ``SECRET_KEY``); changing it invalidates every key.
    """
    key = getattr(settings, "API_KEY_HASH_KEY", None) or settings.SECRET_KEY
    return hmac.new(key.encode(), secret.encode(), hashlib.sha256).hexdigest()


def secret_matches(secret: str, secret_hash: str) -> bool:
    """Constant-time comparison, so response timing says nothing about a stored hash."""
    return hmac.compare_digest(hash_secret(secret).encode(), secret_hash.encode())
