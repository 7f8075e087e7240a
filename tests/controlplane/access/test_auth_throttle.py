"""Failed key authentication is throttled per client address and key prefix, in Redis."""

from __future__ import annotations

import secrets
import time

import pytest
from asgiref.sync import sync_to_async

from controlplane.access import keycache
from controlplane.access import principals as access
from controlplane.access.auth_throttle import FailureCounter
from controlplane.access.principals import AccessError

pytestmark = pytest.mark.django_db(transaction=True)


def _random_key() -> str:
    return "sk-" + secrets.token_hex(4) + secrets.token_urlsafe(32)


async def _status(secret: str, address: str | None = "10.0.0.1") -> AccessError | None:
    try:
        await access.authenticate_secret(secret, endpoint="models", client_address=address)
    except AccessError as exc:
        return exc
    return None


def test_counter_blocks_after_the_limit_until_the_window_passes(redis_client):
    counter = FailureCounter(window_seconds=0.5)
    subjects = {"addr:a": 3}
    assert [counter.retry_after(subjects, count=True) for _ in range(3)] == [0, 0, 0]
    assert 0 < counter.retry_after(subjects, count=False) <= 0.5  # a check counts nothing
    assert counter.retry_after(subjects, count=True) == 0.5  # blocked: the window restarts
    assert counter.retry_after({"addr:b": 3}, count=False) == 0  # other subjects are free
    time.sleep(0.6)
    assert counter.retry_after(subjects, count=False) == 0


def test_counter_lets_attempts_through_while_redis_is_away(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    assert FailureCounter(window_seconds=60).retry_after({"addr:a": 1}, count=True) == 0


async def test_random_keys_from_one_address_get_429_after_the_limit(
    redis_client, settings, monkeypatch
):
    settings.AUTH_FAILURES_PER_ADDRESS = 5
    errors = [await _status(_random_key()) for _ in range(5)]
    assert [e.status for e in errors] == [401] * 5
    loads = []
    real = keycache.key_record_load
    monkeypatch.setattr(keycache, "key_record_load", lambda **kw: loads.append(kw) or real(**kw))
    refused = await _status(_random_key())
    assert refused.status == 429 and loads == []  # refused before the database
    assert refused.body()["error"]["code"] == "rate_limit_exceeded"
    assert set(refused.body()["error"]) == {"message", "type", "param", "code"}
    assert 59 <= int(refused.headers["retry-after"]) <= 60
    assert (await _status(_random_key(), address="10.0.0.2")).status == 401  # others: 401


async def test_a_key_the_process_holds_is_accepted_from_a_blocked_address(
    redis_client, settings, make_tenant, make_key
):
    settings.AUTH_FAILURES_PER_ADDRESS = 3
    tenant = await sync_to_async(make_tenant)("Acme")
    _, secret = await sync_to_async(make_key)(tenant)
    assert await _status(secret) is None
    for _ in range(4):
        await _status(_random_key())
    assert (await _status(_random_key())).status == 429
    assert await _status(secret) is None  # its secret checked; addresses can be shared


async def test_wrong_secrets_of_one_prefix_get_429_but_the_right_one_still_works(
    redis_client, settings, make_tenant, make_key
):
    settings.AUTH_FAILURES_PER_KEY_PREFIX = 4
    tenant = await sync_to_async(make_tenant)("Acme")
    key, secret = await sync_to_async(make_key)(tenant)
    forged = [key.prefix + secrets.token_urlsafe(32) for _ in range(6)]
    statuses = [(await _status(f, address=f"10.1.0.{i}")).status for i, f in enumerate(forged)]
    assert statuses == [401] * 4 + [429] * 2
    # A prefix is public: its owner is never locked out by someone else's guesses.
    assert await _status(secret, address="10.1.0.1") is None


async def test_without_an_address_only_the_prefix_is_counted(redis_client, settings):
    settings.AUTH_FAILURES_PER_ADDRESS = 1
    for _ in range(3):
        assert (await _status(_random_key(), address=None)).status == 401


async def test_scope_refusals_are_not_failed_authentications(
    redis_client, settings, make_tenant, make_key
):
    settings.AUTH_FAILURES_PER_ADDRESS = 1
    tenant = await sync_to_async(make_tenant)("Scoped")
    _, secret = await sync_to_async(make_key)(tenant, scopes=["embeddings"])
    for _ in range(3):
        assert (await _status(secret)).status == 403
    assert (await _status(_random_key())).status == 401
