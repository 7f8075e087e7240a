"""The dedicated metrics port (METRICS_PORT): every series to the allowed networks, the same
token checks as the API port, and nothing but /metrics."""

from __future__ import annotations

import socket

import httpx
import pytest

from controlplane.launcher.redis_server import free_port
from controlplane.metrics.metrics_port import start_configured_metrics_port, start_metrics_port
from tests.inference.metrics.metrics_access import ADAPTER, TENANT, TOKEN


@pytest.fixture
def metrics_port_url():
    server = start_metrics_port("127.0.0.1", free_port())
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def _get(url: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(url, headers=headers)


async def test_an_allowed_address_reads_every_series_without_a_token(
    tenant_traffic, metrics_token, metrics_port_url
):
    response = await _get(f"{metrics_port_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert f'tenant="{TENANT}"' in response.text
    assert f'running_lora_adapters="{ADAPTER}"' in response.text


async def test_other_addresses_need_the_token(
    tenant_traffic, metrics_token, metrics_port_url, settings
):
    settings.METRICS_ALLOWED_NETWORKS = []

    refused = await _get(f"{metrics_port_url}/metrics")
    assert refused.status_code == 401 and TENANT not in refused.text
    assert refused.headers["www-authenticate"].startswith("Bearer")
    wrong = await _get(f"{metrics_port_url}/metrics", Authorization="Bearer nope")
    assert wrong.status_code == 401 and TENANT not in wrong.text
    right = await _get(f"{metrics_port_url}/metrics", Authorization=f"Bearer {TOKEN}")
    assert right.status_code == 200 and f'tenant="{TENANT}"' in right.text


async def test_a_proxied_request_needs_the_token(tenant_traffic, metrics_token, metrics_port_url):
    response = await _get(f"{metrics_port_url}/metrics", **{"X-Forwarded-For": "198.51.100.4"})
    assert response.status_code == 401 and TENANT not in response.text


async def test_only_metrics_is_served(metrics_token, metrics_port_url):
    for path in ("/", "/health", "/v1/models"):
        assert (await _get(f"{metrics_port_url}{path}")).status_code == 404, path


def test_the_port_opens_only_when_configured_and_a_taken_port_is_not_fatal(settings):
    settings.METRICS_PORT = 0
    assert start_configured_metrics_port() is None

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        settings.METRICS_ADDRESS, settings.METRICS_PORT = holder.getsockname()
        assert start_configured_metrics_port() is None  # logged; the API serves on

    settings.METRICS_PORT = free_port()
    server = start_configured_metrics_port()
    try:
        response = httpx.get(f"http://127.0.0.1:{settings.METRICS_PORT}/metrics", timeout=10)
        assert response.status_code == 200
    finally:
        server.shutdown()
        server.server_close()
