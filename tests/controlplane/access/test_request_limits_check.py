"""check_request_limits: the cheap look at a tenant's limits before a request is planned.

It refuses with the 429 ``admit`` would give any request (out of requests or tokens this
minute, at the concurrency limit, over budget) and reserves nothing.
"""

from __future__ import annotations

import logging

import pytest

from controlplane.access import admission as admission_policy
from controlplane.access.principals import AccessError
from tests.controlplane.access.test_ratelimit import _admit, _finish, _principal


async def _check(principal) -> None:
    await admission_policy.check_request_limits(principal, model="m")


async def _refusal(principal) -> AccessError:
    with pytest.raises(AccessError) as info:
        await _check(principal)
    assert info.value.status == 429
    return info.value


async def test_it_reserves_nothing(redis_client):
    principal = _principal(requests_per_minute=2, tokens_per_minute=1000)
    for _ in range(5):
        await _check(principal)
    first = await _admit(principal, prompt=10, max_tokens=10)
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert first.headers["x-ratelimit-remaining-tokens"] == "980"


async def test_a_tenant_out_of_requests_is_refused_as_admit_would(redis_client):
    principal = _principal(requests_per_minute=1)
    await _admit(principal)
    error = await _refusal(principal)
    assert error.body()["error"]["code"] == "rate_limit_exceeded"
    assert "requests per min (RPM): Limit 1" in error.message
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert 59 <= int(error.headers["retry-after"]) <= 60


async def test_a_tenant_at_its_concurrency_limit_is_refused_until_one_finishes(redis_client):
    principal = _principal(max_concurrent_requests=1)
    running = await _admit(principal)
    error = await _refusal(principal)
    assert "concurrent" in error.message and error.headers["retry-after"] == "1"
    await _finish(running)
    await _check(principal)


async def test_a_tenant_out_of_tokens_is_refused_whatever_the_request(redis_client):
    principal = _principal(tokens_per_minute=100)
    await _admit(principal, prompt=50, max_tokens=50)
    error = await _refusal(principal)
    assert error.body()["error"]["type"] == "tokens"


async def test_a_tenant_over_budget_gets_insufficient_quota(redis_client):
    principal = _principal(monthly_token_budget=20)
    admission = await _admit(principal, prompt=10, max_tokens=10)
    await _finish(admission, prompt=10, completion=10)
    error = await _refusal(principal)
    assert error.body()["error"]["code"] == "insufficient_quota"


async def test_an_unlimited_tenant_costs_no_redis_round_trip(redis_client):
    await _check(_principal())
    assert not [k for k in redis_client.keys("*") if b":rl:" in k]


async def test_redis_away_is_a_503_with_one_log_line_not_a_traceback(settings, caplog):
    """Every request of a limited tenant asks the limiter: an outage must not log a
    traceback per request (docs/operations.md, "Failure modes")."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    principal = _principal(requests_per_minute=5)
    with caplog.at_level(logging.WARNING, logger="controlplane.access.admission"):
        for attempt in (_check(principal), _admit(principal)):
            with pytest.raises(AccessError) as info:
                await attempt
            assert info.value.status == 503 and info.value.headers["retry-after"] == "1"
    lines = [r for r in caplog.records if "rate limiter unavailable" in r.getMessage()]
    assert len(lines) == 2 and all(r.exc_info is None for r in lines)
