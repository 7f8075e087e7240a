"""Rate limits through inference.access.admit/finish: headers, 429 bodies, token correction."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.access import admission as admission_policy
from controlplane.access.principals import AccessError, Principal
from controlplane.access.ratelimit import Limits, format_reset


def _principal(tenant_id: int = 1, **limits) -> Principal:
    return Principal(
        key_id=1,
        key_prefix="sk-test0000",
        tenant_id=tenant_id,
        tenant_slug="t",
        cache_salt="salt",
        allowed_models=None,
        limits=Limits(**limits),
    )


async def _admit(principal, prompt=10, max_tokens=10):
    return await admission_policy.admit(
        principal, model="m", prompt_tokens=prompt, max_tokens=max_tokens
    )


async def _finish(admission, prompt=10, completion=10):
    await admission_policy.finish(
        admission,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=0,
        status=200,
        finish_reason="stop",
        time_to_first_token=0.01,
        latency=0.1,
    )
    await admission_policy.finish_pending()  # the release runs in the background; wait for it here


async def test_request_headers_count_down_then_429_in_openai_format(redis_client):
    principal = _principal(requests_per_minute=3)
    seen = []
    for _ in range(3):
        admission = await _admit(principal)
        seen.append(admission.headers["x-ratelimit-remaining-requests"])
        assert admission.headers["x-ratelimit-limit-requests"] == "3"
    assert seen == ["2", "1", "0"]
    with pytest.raises(AccessError) as info:
        await _admit(principal)
    error = info.value
    assert error.status == 429
    assert error.body()["error"]["type"] == "requests"
    assert error.body()["error"]["code"] == "rate_limit_exceeded"
    assert "requests per min (RPM): Limit 3" in error.message
    # One request refills in 20 s at 3/min.
    assert 19 <= int(error.headers["retry-after"]) <= 20
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.headers["x-ratelimit-reset-requests"].endswith("s")


async def test_tokens_reserved_at_admission_and_corrected_at_finish(redis_client):
    principal = _principal(tokens_per_minute=1000)
    first = await _admit(principal, prompt=100, max_tokens=400)
    assert first.headers["x-ratelimit-remaining-tokens"] == "500"
    with pytest.raises(AccessError) as info:
        await _admit(principal, prompt=100, max_tokens=500)
    assert info.value.body()["error"]["type"] == "tokens"
    # It used only 150 of the 500 reserved: 350 come back.
    await _finish(first, prompt=100, completion=50)
    second = await _admit(principal, prompt=100, max_tokens=500)
    assert 250 <= int(second.headers["x-ratelimit-remaining-tokens"]) <= 252


async def test_request_larger_than_the_token_limit_is_refused_outright(redis_client):
    with pytest.raises(AccessError) as info:
        await _admit(_principal(tokens_per_minute=100), prompt=80, max_tokens=80)
    assert info.value.status == 429
    assert "Request too large" in info.value.message
    assert "retry-after" not in info.value.headers  # retrying the same request cannot succeed


async def test_concurrency_slot_is_freed_by_finish(redis_client):
    principal = _principal(max_concurrent_requests=2)
    a = await _admit(principal)
    await _admit(principal)
    with pytest.raises(AccessError) as info:
        await _admit(principal)
    assert info.value.status == 429 and info.value.headers["retry-after"] == "1"
    await _finish(a)
    await _finish(a)  # a second finish is a no-op, not a second release
    await _admit(principal)
    with pytest.raises(AccessError):
        await _admit(principal)


async def test_monthly_budget_is_insufficient_quota(redis_client):
    principal = _principal(monthly_token_budget=100)
    admission = await _admit(principal, prompt=30, max_tokens=30)
    await _finish(admission, prompt=30, completion=30)
    with pytest.raises(AccessError) as info:
        await _admit(principal, prompt=30, max_tokens=30)
    assert info.value.body()["error"]["code"] == "insufficient_quota"


async def test_tenants_do_not_share_buckets(redis_client):
    await _admit(_principal(tenant_id=1, requests_per_minute=1))
    await _admit(_principal(tenant_id=2, requests_per_minute=1))
    with pytest.raises(AccessError):
        await _admit(_principal(tenant_id=1, requests_per_minute=1))


async def test_unlimited_tenant_gets_no_headers_and_no_redis_state(redis_client):
    admission = await _admit(_principal())
    assert admission.headers == {}
    assert not [k for k in redis_client.keys("*") if b":rl:" in k]


async def test_fifty_concurrent_admissions_admit_exactly_the_limit(redis_client):
    principal = _principal(requests_per_minute=10)

    async def one():
        try:
            return (await _admit(principal)).headers["x-ratelimit-remaining-requests"]
        except AccessError as error:
            return error.status

    results = await asyncio.gather(*(one() for _ in range(50)))
    admitted = sorted(int(r) for r in results if isinstance(r, str))
    assert admitted == list(range(10))
    assert results.count(429) == 40


async def test_negative_counts_are_a_400(redis_client):
    with pytest.raises(AccessError) as info:
        await _admit(_principal(requests_per_minute=1), prompt=-1)
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.02, "20ms"), (1.5, "1.5s"), (6.0, "6s"), (360.0, "6m0s")]
)
def test_reset_format_matches_openai(seconds, text):
    assert format_reset(seconds) == text


async def test_more_concurrent_requests_than_redis_connections_wait_not_fail(
    redis_client, settings
):
    # redis-py's default asyncio pool raises past its size; this one must queue instead.
    settings.REDIS_MAX_CONNECTIONS = 4
    principal = _principal(requests_per_minute=1_000_000)
    admissions = await asyncio.gather(*(_admit(principal) for _ in range(60)))
    assert len({a.request_id for a in admissions}) == 60
