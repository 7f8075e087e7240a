"""Fixtures for control-plane tests: tenants and keys made through the real services
(defined in tests/support/tenant_fixtures.py, which tests outside this tree import)."""

from tests.support.tenant_fixtures import (  # noqa: F401 (fixtures for every test below)
    _fresh_key_cache,
    make_key,
    make_tenant,
    staff_client,
)
