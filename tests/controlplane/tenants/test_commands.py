"""manage.py create_tenant, create_api_key and revoke_api_key (DESIGN.md section 13)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from controlplane.audit.models import AuditEvent
from controlplane.tenants.key_secrets import secret_matches
from controlplane.tenants.models import ApiKey, Tenant

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_create_tenant_key_and_revoke(redis_client):
    _run("create_tenant", "Big Co", "--rpm", "60", "--tpm", "10000", "--max-concurrent", "4")
    tenant = Tenant.objects.get(name="Big Co")
    assert (tenant.requests_per_minute, tenant.tokens_per_minute) == (60, 10000)
    assert tenant.max_concurrent_requests == 4

    secret = _run("create_api_key", "--tenant", "Big Co", "--name", "ci").splitlines()[-1]
    key = ApiKey.objects.get(tenant=tenant)
    assert key.name == "ci" and secret_matches(secret, key.secret_hash)

    assert "revoked" in _run("revoke_api_key", key.prefix)
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert "already revoked" in _run("revoke_api_key", secret)
    assert AuditEvent.objects.filter(action="api_key.revoke", actor_label="manage.py").exists()


def test_bad_input_gives_clear_errors(redis_client):
    with pytest.raises(CommandError, match="no tenant named"):
        _run("create_api_key", "--tenant", "nobody")
    _run("create_tenant", "Dup")
    with pytest.raises(CommandError, match="already exists"):
        _run("create_tenant", "Dup")
    with pytest.raises(CommandError, match="no API key matches"):
        _run("revoke_api_key", "sk-00000000")
    tenant = Tenant.objects.get(name="Dup")
    secret = _run("create_api_key", "--tenant", "dup").splitlines()[-1]
    forged = secret[:11] + "x" * 20  # right prefix, wrong secret: refused, key untouched
    with pytest.raises(CommandError):
        _run("revoke_api_key", forged)
    assert ApiKey.objects.get(tenant=tenant).revoked_at is None
