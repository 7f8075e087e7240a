"""Writes on tenants and API keys. The admin and the management commands call these."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils.text import slugify

from controlplane.tenants.models import ApiKey, Tenant

KEY_PREFIX_LEN = 8


def _new_cache_salt() -> str:
    return secrets.token_hex(32)


def hash_secret(secret: str) -> str:
    """Keyed hash of an API key secret: a database leak alone does not reveal keys."""
    return hmac.new(settings.SECRET_KEY.encode(), secret.encode(), hashlib.sha256).hexdigest()


@transaction.atomic
def tenant_create(
    *,
    name: str,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent_requests: int | None = None,
    monthly_token_budget: int | None = None,
) -> Tenant:
    return Tenant.objects.create(
        name=name,
        slug=slugify(name) or secrets.token_hex(4),
        cache_salt=_new_cache_salt(),
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        max_concurrent_requests=max_concurrent_requests,
        monthly_token_budget=monthly_token_budget,
    )


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once; never stored


@transaction.atomic
def api_key_create(*, tenant: Tenant, name: str = "default") -> CreatedKey:
    prefix = "sk-" + secrets.token_hex(KEY_PREFIX_LEN // 2)
    secret = f"{prefix}{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        tenant=tenant, name=name, prefix=prefix, secret_hash=hash_secret(secret)
    )
    return CreatedKey(key=key, secret=secret)
