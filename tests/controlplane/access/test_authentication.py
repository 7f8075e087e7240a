"""Authentication through controlplane.access.principals (and the header parsing in front of it): 401/403 with OpenAI bodies, caching, revocation."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from controlplane.access import keycache
from controlplane.access import principals as access
from controlplane.access.keycache import KeyCache, key_cache
from controlplane.access.principals import AccessError
from controlplane.tenants import key_secrets
from controlplane.tenants.key_secrets import prefix_of
from controlplane.tenants.models import ApiKey
from controlplane.tenants.services import api_key_revoke, tenant_update
from inference import credentials

pytestmark = pytest.mark.django_db(transaction=True)


async def _refused(authorization, endpoint="chat.completions") -> AccessError:
    with pytest.raises(AccessError) as info:
        await credentials.authenticate(authorization, endpoint=endpoint)
    return info.value


@pytest.fixture
def tenant_and_secret(make_tenant, make_key):
    tenant = make_tenant("Acme", requests_per_minute=100)
    key, secret = make_key(tenant, name="ci")
    return tenant, key, secret


async def test_valid_key_resolves_to_its_tenant(tenant_and_secret):
    tenant, key, secret = tenant_and_secret
    principal = await credentials.authenticate(f"Bearer {secret}", endpoint="chat.completions")
    assert principal.tenant_id == tenant.pk
    assert principal.key_prefix == key.prefix
    assert principal.limits.requests_per_minute == 100
    assert tenant.cache_salt not in repr(principal)


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer ", "Basic dXNlcjpwYXNz", "sk-no-scheme", "Bearer sk-unknown0000000000000"],
)
async def test_missing_or_unknown_key_is_401_with_openai_body(header, redis_client):
    error = await _refused(header)
    assert error.status == 401
    assert error.body()["error"]["code"] == "invalid_api_key"
    assert error.body()["error"]["type"] == "invalid_request_error"
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


async def test_right_prefix_wrong_secret_is_401_and_compared_in_constant_time(
    tenant_and_secret, monkeypatch
):
    _, key, secret = tenant_and_secret
    compared = []
    real = key_secrets.hmac.compare_digest

    def recording(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(key_secrets.hmac, "compare_digest", recording)
    forged = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    error = await _refused(f"Bearer {forged}")
    assert error.status == 401
    assert "Incorrect API key" in error.message
    assert secret not in error.message  # the message masks what was sent
    assert compared and compared[-1][1] == key.secret_hash.encode()


async def test_revoked_key_is_401(tenant_and_secret):
    _, key, secret = tenant_and_secret
    await credentials.authenticate(f"Bearer {secret}", endpoint="models")
    await sync_to_async(api_key_revoke)(key=key)
    error = await _refused(f"Bearer {secret}")
    assert (error.status, error.message) == (401, "This API key has been revoked.")


async def test_expired_key_is_401(make_tenant, make_key):
    tenant = await sync_to_async(make_tenant)("Expiring")
    _, secret = await sync_to_async(make_key)(
        tenant, expires_at=timezone.now() + timedelta(seconds=1)
    )
    await credentials.authenticate(f"Bearer {secret}", endpoint="models")  # cached while valid
    await asyncio.sleep(1.1)
    error = await _refused(f"Bearer {secret}")
    assert (error.status, error.message) == (401, "This API key has expired.")


async def test_disabled_tenant_is_401(tenant_and_secret):
    tenant, _, secret = tenant_and_secret
    await sync_to_async(tenant_update)(tenant=tenant, is_active=False)
    assert (await _refused(f"Bearer {secret}")).status == 401


async def test_endpoint_outside_scopes_is_403(make_tenant, make_key):
    tenant = await sync_to_async(make_tenant)("Scoped")
    _, secret = await sync_to_async(make_key)(tenant, scopes=["embeddings"])
    principal = await credentials.authenticate(f"Bearer {secret}", endpoint="/v1/embeddings")
    assert principal.scopes == frozenset({"embeddings"})
    error = await _refused(f"Bearer {secret}", endpoint="chat.completions")
    assert error.status == 403
    assert error.body()["error"]["code"] == "insufficient_scope"


async def test_hot_path_does_not_query_the_database(tenant_and_secret, monkeypatch):
    _, _, secret = tenant_and_secret
    await credentials.authenticate(f"Bearer {secret}", endpoint="models")

    def no_db(**kwargs):
        raise AssertionError("the database was queried on a cached key")

    monkeypatch.setattr(keycache, "key_record_load", no_db)
    for _ in range(20):
        await credentials.authenticate(f"Bearer {secret}", endpoint="models")


def test_revocation_reaches_another_process_cache_within_the_epoch_interval(
    tenant_and_secret, settings
):
    """Two KeyCache objects stand for two API processes sharing Redis."""
    _, key, _ = tenant_and_secret
    settings.AUTH_EPOCH_CHECK_SECONDS = 0.5
    other = KeyCache()
    prefix = key.prefix
    assert not other.get(prefix).revoked
    api_key_revoke(key=key)
    start = time.monotonic()
    while not other.get(prefix).revoked:
        assert time.monotonic() - start < 5, "revocation not visible within 5 s"
        time.sleep(0.05)
    assert time.monotonic() - start <= 1.0


def test_unknown_prefixes_are_cached_negatively(redis_client, monkeypatch):
    cache = KeyCache()
    calls = []
    real = keycache.key_record_load
    monkeypatch.setattr(keycache, "key_record_load", lambda **kw: calls.append(kw) or real(**kw))
    for _ in range(5):
        assert cache.get("sk-00000000") is None
    assert len(calls) == 1


async def test_a_burst_on_a_lapsed_key_reads_the_database_once(tenant_and_secret, monkeypatch):
    """128 requests with one key whose cache entry lapsed (a key change elsewhere, or its age)
    wait for one read of the key, not one read (a thread and a connection) each."""
    _, key, secret = tenant_and_secret
    cache = KeyCache()
    loads = []
    real = keycache.key_record_load

    def slow_load(**kwargs):
        loads.append(kwargs)
        time.sleep(0.05)  # long enough for every request of the burst to miss the cache
        return real(**kwargs)

    monkeypatch.setattr(keycache, "key_record_load", slow_load)
    records = await asyncio.gather(*[cache.aget(key.prefix) for _ in range(128)])
    assert len(loads) == 1
    assert {record.prefix for record in records} == {key.prefix}
    assert access.check_key(records[0], secret, endpoint="models").key_id == key.pk
    # Cached from then on; a lapse later reads again, once.
    await cache.aget(key.prefix)
    assert len(loads) == 1
    cache.invalidate_local()
    await asyncio.gather(*[cache.aget(key.prefix) for _ in range(8)])
    assert len(loads) == 2


def test_the_stored_row_never_contains_the_secret(tenant_and_secret):
    _, key, secret = tenant_and_secret
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tenants_apikey WHERE id = %s", [key.pk])
        row = cursor.fetchone()
    as_text = " ".join(str(value) for value in row)
    assert secret not in as_text
    assert secret[len(key.prefix) :] not in as_text  # not even the random part
    stored = ApiKey.objects.get(pk=key.pk).secret_hash
    assert stored != hashlib.sha256(secret.encode()).hexdigest()  # keyed, not a bare digest
    assert key_secrets.secret_matches(secret, stored)


def _check_cached(secret: str):
    """The key policy on the record the key cache holds (its synchronous path)."""
    return access.check_key(key_cache.get(prefix_of(secret)), secret, endpoint="models")


async def test_last_use_lost_to_a_redis_outage_is_one_log_line(tenant_and_secret, settings, caplog):
    _, key, secret = tenant_and_secret
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    access._last_used_pushed.pop(key.pk, None)  # its last use is due
    with caplog.at_level(logging.WARNING, logger="controlplane.access.principals"):
        principal = await access.key_principal(secret, endpoint="models")
    assert principal.key_prefix == key.prefix
    (record,) = [r for r in caplog.records if "could not record last use" in r.getMessage()]
    # The outage is told on the request path; this line adds the key, not a traceback.
    assert record.exc_info is None and "Error" in record.getMessage()


def test_keys_still_authenticate_while_redis_is_unreachable(tenant_and_secret, settings):
    _, _, secret = tenant_and_secret
    _check_cached(secret)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    time.sleep(0.25)  # the epoch check is due again
    assert _check_cached(secret).key_prefix
