"""finish() hands usage recording to a background task: a slow or broken Redis delays no
response and raises into no view."""

from __future__ import annotations

import asyncio
import time

from controlplane.access import admission as admission_policy
from controlplane.access.principals import Principal
from controlplane.access.ratelimit import Limits
from controlplane.common.redis_clients import redis_key
from controlplane.usage.events import usage_queue_key

PRINCIPAL = Principal(
    key_id=1,
    key_prefix="sk-test0000",
    tenant_id=7,
    tenant_slug="t",
    cache_salt="salt",
    allowed_models=None,
    limits=Limits(max_concurrent_requests=5),
)


async def _finish(admission):
    await admission_policy.finish(
        admission,
        prompt_tokens=3,
        completion_tokens=4,
        cached_tokens=0,
        status=200,
        finish_reason="stop",
        time_to_first_token=None,
        latency=0.01,
    )


class _SlowPipeline:
    def __init__(self, pipe, delay: float, fail: bool):
        self._pipe, self._delay, self._fail = pipe, delay, fail

    def __getattr__(self, name):
        return getattr(self._pipe, name)

    async def execute(self):
        await asyncio.sleep(self._delay)
        if self._fail:
            raise ConnectionError("redis went away")
        return await self._pipe.execute()


def _slow_redis(monkeypatch, *, delay: float, fail: bool = False):
    real = admission_policy.async_redis

    class Client:
        def pipeline(self, **kwargs):
            return _SlowPipeline(real().pipeline(**kwargs), delay, fail)

    monkeypatch.setattr(admission_policy, "async_redis", lambda: Client())
    return real


async def test_finish_returns_before_redis_answers(redis_client, monkeypatch):
    admission = await admission_policy.admit(PRINCIPAL, model="m", prompt_tokens=3, max_tokens=4)
    _slow_redis(monkeypatch, delay=0.5)
    start = time.monotonic()
    await _finish(admission)
    assert time.monotonic() - start < 0.1
    assert redis_client.llen(usage_queue_key()) == 0  # not written yet...
    await admission_policy.finish_pending()
    assert redis_client.llen(usage_queue_key()) == 1  # ...but written, and the slot released
    assert redis_client.zcard(redis_key("rl", 7, "inflight")) == 0


async def test_a_failing_redis_is_logged_not_raised_and_the_event_spooled(
    redis_client, monkeypatch, caplog
):
    from controlplane.usage.spool import spool

    admission = await admission_policy.admit(PRINCIPAL, model="m", prompt_tokens=3, max_tokens=4)
    _slow_redis(monkeypatch, delay=0.0, fail=True)
    await _finish(admission)
    await admission_policy.finish_pending()
    assert "spooled" in caplog.text
    assert admission.request_id.encode() in spool.path.read_bytes()  # kept for the replay
