"""/metrics of a real Daphne on 127.0.0.1: tenant series only with the token (or on the
metrics port), the rest to loopback, nothing to addresses outside the allowlist."""

from __future__ import annotations

import time

import httpx
import pytest

from controlplane.launcher.redis_server import free_port
from tests.support.metrics_access import TOKEN
from tests.support.platform_services import serving_daphne

pytestmark = pytest.mark.slow

BEARER = {"Authorization": f"Bearer {TOKEN}"}
TENANT_LABEL = 'tenant="acme"'


def _served_one_request(platform, metrics_url: str) -> None:
    platform.sdk().completions.create(model=platform.chat_model, prompt="hi", max_tokens=2)
    deadline = time.monotonic() + 10  # recorded as the generation settles
    while TENANT_LABEL not in httpx.get(metrics_url, headers=BEARER, timeout=10).text:
        assert time.monotonic() < deadline, "the request never reached /metrics"
        time.sleep(0.1)


def test_tenant_series_need_the_token_or_the_metrics_port(platform, tmp_path):
    port = free_port()
    env = {**platform.env, "METRICS_BEARER_TOKEN": TOKEN, "METRICS_PORT": str(port)}
    with serving_daphne(env, tmp_path / "daphne.log", timeout=60) as url:
        _served_one_request(platform, f"{url}/metrics")

        with_token = httpx.get(f"{url}/metrics", headers=BEARER, timeout=10)
        assert with_token.status_code == 200 and TENANT_LABEL in with_token.text
        loopback = httpx.get(f"{url}/metrics", timeout=10)
        assert loopback.status_code == 200
        assert "vllm:num_requests_running{" in loopback.text and "tenant=" not in loopback.text
        proxied = httpx.get(f"{url}/metrics", headers={"X-Forwarded-For": "1.2.3.4"}, timeout=10)
        assert proxied.status_code == 401 and "acme" not in proxied.text
        wrong = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer x"}, timeout=10)
        assert wrong.status_code == 401 and "acme" not in wrong.text

        on_port = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert on_port.status_code == 200 and TENANT_LABEL in on_port.text
        assert "django_http_responses_total_by_status_total" in on_port.text


def test_addresses_outside_the_allowlist_get_no_metrics_but_health(platform, tmp_path):
    env = {**platform.env, "METRICS_BEARER_TOKEN": TOKEN, "METRICS_ALLOWED_NETWORKS": ""}
    with serving_daphne(env, tmp_path / "daphne.log", timeout=60) as url:
        refused = httpx.get(f"{url}/metrics", timeout=10)
        assert refused.status_code == 401 and "vllm:" not in refused.text
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        assert httpx.get(f"{url}/ready", timeout=10).status_code == 200
        assert httpx.get(f"{url}/metrics", headers=BEARER, timeout=10).status_code == 200
