"""A request the engines refuse is accounted the same over HTTP and the WebSocket.

Both transports run one generation use case, so a refusal (here: no engine serves the model,
503) queues one usage record with the prompt tokens the request was planned with and counts
one finished request in the metrics, whichever way it came in.
"""

from __future__ import annotations

import json
import time

import httpx
import redis
import websockets

from controlplane.usage.events import decode_event
from tests.inference.metrics.test_metrics_e2e import scrape_redis, total
from tests.support.api_platform import IDLE_MODEL, REDIS_PREFIX

USER = [{"role": "user", "content": "hello there, is anyone serving this model?"}]


def _usage_events(platform) -> list:
    client = redis.Redis.from_url(platform.redis_url)
    try:
        raw = client.lrange(f"{REDIS_PREFIX}:usage:queue", 0, -1)
    finally:
        client.close()
    return [decode_event(item) for item in raw]


def _refused_requests(platform) -> float:
    return total(
        scrape_redis(platform),
        "vllm:request_success_total",
        model_name=IDLE_MODEL,
        finished_reason="error",
    )


def _new_events(platform, before: int) -> list:
    """Usage of IDLE_MODEL queued after ``before`` (the write runs in the background: wait)."""
    deadline = time.monotonic() + 5
    while True:
        events = [e for e in _usage_events(platform)[before:] if e.model == IDLE_MODEL]
        if events or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def _refuse_over_http(platform) -> int:
    response = httpx.post(
        f"{platform.base_url}/v1/chat/completions",
        json={"model": IDLE_MODEL, "messages": USER, "max_tokens": 4},
        headers={"Authorization": f"Bearer {platform.api_key}"},
        timeout=30,
    )
    return response.status_code


async def _refuse_over_websocket(platform) -> int:
    url = platform.base_url.replace("http://", "ws://") + "/v1/ws"
    headers = {"Authorization": f"Bearer {platform.api_key}"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        assert json.loads(await ws.recv())["type"] == "auth.ok"
        body = {"model": IDLE_MODEL, "messages": USER, "max_tokens": 4}
        await ws.send(json.dumps({"type": "chat.completions", "id": "g1", "body": body}))
        reply = json.loads(await ws.recv())
    assert reply["type"] == "error" and reply["id"] == "g1"
    return reply["status"]


async def test_a_refused_request_is_accounted_alike_over_both_transports(platform):
    queued, refused = len(_usage_events(platform)), _refused_requests(platform)
    assert _refuse_over_http(platform) == 503
    http_events = _new_events(platform, queued)

    queued = len(_usage_events(platform))
    assert await _refuse_over_websocket(platform) == 503
    ws_events = _new_events(platform, queued)

    assert len(http_events) == len(ws_events) == 1
    http_event, ws_event = http_events[0], ws_events[0]
    assert http_event.status == ws_event.status == 503
    assert http_event.prompt_tokens == ws_event.prompt_tokens > 0  # as planned, not zero
    assert http_event.completion_tokens == ws_event.completion_tokens == 0
    assert _refused_requests(platform) == refused + 2
