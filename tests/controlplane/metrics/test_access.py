"""Who reads /metrics: the bearer token shows every series; an allowed network without it
only those naming no tenant and no adapter; anyone else gets 401 or 403 and no metrics. The
dedicated metrics port (METRICS_PORT) gives every series to the allowed networks, makes the
same token checks as the API port, and serves nothing but /metrics."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.launcher.redis_server import free_port
from controlplane.metrics import definitions as d
from controlplane.metrics.access import metrics_bearer_token
from controlplane.metrics.metrics_port import start_configured_metrics_port, start_metrics_port
from tests.support.metrics_access import ADAPTER, TENANT, TOKEN, asgi_get
from tests.support.processes import REPO

OUTSIDE = ("203.0.113.7", 41000)  # TEST-NET-3: in no allowlist of ours
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _families(response) -> dict:
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def _assert_refused_without_metrics(response, status: int) -> None:
    assert response.status_code == status, response.text
    assert TENANT not in response.text and ADAPTER not in response.text
    assert "vllm:" not in response.text


async def test_outside_address_without_token_gets_401_and_no_metrics(tenant_traffic, metrics_token):
    response = await asgi_get("/metrics", client=OUTSIDE)
    _assert_refused_without_metrics(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_the_token_reads_every_tenant_series_from_any_address(tenant_traffic, metrics_token):
    response = await asgi_get("/metrics", client=OUTSIDE, headers=BEARER)

    assert response.status_code == 200
    families = _families(response)
    success = families[d.REQUEST_SUCCESS.name].samples
    assert {(s.labels["tenant"], s.labels["model_name"]) for s in success} == {(TENANT, ADAPTER)}
    [lora] = families[d.LORA_REQUESTS_INFO.name].samples
    assert lora.labels["running_lora_adapters"] == ADAPTER
    assert "django_http_responses_total_by_status" in families


@pytest.mark.parametrize("authorization", [f"Bearer {TOKEN}x", "Bearer", f"Basic {TOKEN}"])
async def test_a_wrong_token_is_401_even_from_loopback(
    tenant_traffic, metrics_token, authorization
):
    response = await asgi_get("/metrics", headers={"Authorization": authorization})
    _assert_refused_without_metrics(response, 401)
    assert "invalid_token" in response.headers["www-authenticate"]


async def test_loopback_without_token_reads_only_series_naming_no_tenant(
    tenant_traffic, metrics_token
):
    response = await asgi_get("/metrics")

    assert response.status_code == 200
    assert TENANT not in response.text and ADAPTER not in response.text
    families = _families(response)
    for spec in d.ALL_METRICS:  # every family is announced; the tenant-labelled ones empty
        assert spec.name in families, spec.name
    assert families[d.REQUEST_SUCCESS.name].samples == []
    assert families[d.LORA_REQUESTS_INFO.name].samples == []
    running = families["vllm:num_requests_running"].samples
    assert [(s.labels, s.value) for s in running] == [({"model_name": "tiny", "engine": "e1"}, 1)]
    assert "django_http_requests_total_by_view_transport_method" in families


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP"])
async def test_a_request_relayed_by_a_proxy_is_not_let_in_by_its_address(
    tenant_traffic, metrics_token, header
):
    # A reverse proxy on the same host connects from loopback on anyone's behalf.
    response = await asgi_get("/metrics", headers={header: "198.51.100.4"})
    _assert_refused_without_metrics(response, 401)

    proxied = await asgi_get("/metrics", headers={header: "198.51.100.4", **BEARER})
    assert proxied.status_code == 200 and TENANT in proxied.text


async def test_the_allowlist_decides_which_addresses_need_no_token(
    tenant_traffic, metrics_token, settings
):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8", "fd00::/8"]

    for address in ("10.1.2.3", "::ffff:10.1.2.3", "fd00::5"):
        response = await asgi_get("/metrics", client=(address, 5000))
        assert response.status_code == 200, address
        assert "vllm:num_requests_running{" in response.text and TENANT not in response.text
    _assert_refused_without_metrics(await asgi_get("/metrics"), 401)  # loopback left out
    _assert_refused_without_metrics(await asgi_get("/metrics", client=("11.0.0.1", 5000)), 401)


async def test_without_any_token_outside_addresses_get_403(tenant_traffic, settings, tmp_path):
    settings.METRICS_BEARER_TOKEN = ""
    (tmp_path / "a-file").write_text("")
    settings.METRICS_TOKEN_FILE = tmp_path / "a-file" / "metrics_token"  # cannot be made

    _assert_refused_without_metrics(await asgi_get("/metrics", client=OUTSIDE), 403)
    response = await asgi_get("/metrics", headers={"Authorization": "Bearer anything"})
    _assert_refused_without_metrics(response, 401)
    assert (await asgi_get("/metrics")).status_code == 200


async def test_an_unset_token_is_generated_once_into_a_private_file(
    tenant_traffic, settings, tmp_path
):
    settings.METRICS_BEARER_TOKEN = ""
    settings.METRICS_TOKEN_FILE = tmp_path / "var" / "metrics_token"

    token = metrics_bearer_token()
    assert len(token) >= 32 and token == metrics_bearer_token()
    assert settings.METRICS_TOKEN_FILE.read_text().strip() == token
    assert settings.METRICS_TOKEN_FILE.stat().st_mode & 0o777 == 0o600
    headers = {"Authorization": f"Bearer {token}"}
    response = await asgi_get("/metrics", client=OUTSIDE, headers=headers)
    assert response.status_code == 200 and TENANT in response.text


async def test_health_and_ready_stay_open_to_every_address(tenant_traffic, metrics_token):
    for path in ("/health", "/ready"):
        outside = await asgi_get(path, client=OUTSIDE)
        assert outside.status_code == 200, path
        assert outside.content == (await asgi_get(path)).content


def test_a_malformed_allowlist_stops_the_process_with_its_name():
    env = {**os.environ, "METRICS_ALLOWED_NETWORKS": "10.0.0.0/8, 10.0.0.300/32"}
    out = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "METRICS_ALLOWED_NETWORKS: '10.0.0.300/32' is not a network" in out.stderr


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
