"""Fixtures for tests of keys and tenants: tenants and keys made through the real services,
and a fresh per-process key cache. tests/controlplane/conftest.py uses them for its tree; a
test module elsewhere imports them to use them."""

from __future__ import annotations

import pytest

from controlplane.access.keycache import key_cache
from controlplane.tenants.services import api_key_create, tenant_create


@pytest.fixture(autouse=True)
def _fresh_key_cache(settings):
    # The cache is per process; tests must not see each other's entries.
    settings.AUTH_EPOCH_CHECK_SECONDS = 0.2
    key_cache.invalidate_local()
    yield
    key_cache.invalidate_local()


@pytest.fixture
def make_tenant(redis_client):
    """``make_tenant(name, **limits)``; the session Redis is emptied first (fresh buckets)."""
    counter = iter(range(1, 10_000))

    def make(name: str | None = None, **limits):
        return tenant_create(name=name or f"Tenant {next(counter)}", **limits)

    return make


@pytest.fixture
def make_key():
    """``make_key(tenant, **options) -> (ApiKey, secret)``."""

    def make(tenant, **options):
        created = api_key_create(tenant=tenant, **options)
        return created.key, created.secret

    return make


@pytest.fixture
def staff_client(client, django_user_model):
    """Django's test client signed in as a superuser ("root"), for admin pages."""
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client
