"""Test helpers for /metrics access: a tenant's traffic in Redis, and the platform's token."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from django.core.asgi import get_asgi_application

from controlplane.metrics import record_request, register_collector
from engine import protocol
from engine.protocol import EngineStatus, Keys

TOKEN = "test-metrics-token-0123456789abcdef"
TENANT = "acme-secret-tenant"
ADAPTER = "acme-legal-lora"
LOOPBACK = ("127.0.0.1", 40000)


@dataclass
class AsgiResponse:
    status_code: int
    headers: dict[str, str]  # lower-case names
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode()


async def asgi_get(
    path: str, *, client: tuple[str, int] = LOOPBACK, headers: dict[str, str] | None = None
) -> AsgiResponse:
    """GET through Django's ASGI handler from ``client``, the scope's peer address that Daphne
    fills from the TCP connection (Django's AsyncClient always says 127.0.0.1)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")]
        + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": client,
        "server": ("testserver", 80),
    }
    sent, received = [], []

    async def receive():
        if not received:
            received.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays: Django cancels this when done

    async def send(message):
        sent.append(message)

    await get_asgi_application()(scope, receive, send)
    start, *body = sent
    return AsgiResponse(
        start["status"],
        {k.decode().lower(): v.decode() for k, v in start["headers"]},
        b"".join(message.get("body", b"") for message in body),
    )


async def record_tenant_traffic(redis_client) -> None:
    """One engine of model "tiny" running ADAPTER, and one finished request of TENANT."""
    register_collector()
    keys = Keys()
    status = EngineStatus(
        engine_id="e1",
        model="tiny",
        num_running=1,
        running_lora_adapters=[ADAPTER],
        max_lora=2,
        updated_at=time.time(),
    )
    redis_client.sadd(keys.engines(), protocol.engine_member("tiny", "e1"))
    redis_client.set(keys.status("tiny", "e1"), protocol.encode_status(status), ex=5)
    await record_request(
        model=ADAPTER,
        tenant=TENANT,
        finished_reason="stop",
        prompt_tokens=5,
        generation_tokens=2,
        e2e_latency=0.5,
        time_to_first_token=0.1,
        inter_token_latencies=[0.2],
        queue_time=0.01,
        prefill_time=0.05,
        decode_time=0.3,
    )


def platform_metrics_headers(env: dict[str, str]) -> dict[str, str]:
    """``Authorization`` for /metrics of the processes started with ``env``: its
    METRICS_BEARER_TOKEN, else the token Daphne generated in its var folder on start."""
    token = env.get("METRICS_BEARER_TOKEN") or (
        (Path(env["PLATFORM_VAR_DIR"]) / "metrics_token").read_text().strip()
    )
    return {"Authorization": f"Bearer {token}"}
