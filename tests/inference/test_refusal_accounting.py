"""A request the engines refuse is accounted the same over HTTP and the WebSocket.

Both transports run one generation use case, so a refusal (here: no engine serves the model,
503) queues one usage record that bills nothing (no engine took it: zero prompt and
completion tokens, so zero cost at any price) and counts one finished request in the
metrics, whichever way it came in.
"""

from __future__ import annotations

import json
import time

import httpx
import websockets

from tests.inference.metrics.test_metrics_e2e import scrape_redis, total
from tests.support.api_platform import IDLE_MODEL

USER = [{"role": "user", "content": "hello there, is anyone serving this model?"}]


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
        events = [e for e in platform.usage_events()[before:] if e.model == IDLE_MODEL]
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
    queued, refused = len(platform.usage_events()), _refused_requests(platform)
    assert _refuse_over_http(platform) == 503
    http_events = _new_events(platform, queued)

    queued = len(platform.usage_events())
    assert await _refuse_over_websocket(platform) == 503
    ws_events = _new_events(platform, queued)

    assert len(http_events) == len(ws_events) == 1
    http_event, ws_event = http_events[0], ws_events[0]
    assert http_event.status == ws_event.status == 503
    assert http_event.prompt_tokens == ws_event.prompt_tokens == 0  # never reached an engine
    assert http_event.completion_tokens == ws_event.completion_tokens == 0
    assert _refused_requests(platform) == refused + 2
