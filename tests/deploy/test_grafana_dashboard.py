"""The Grafana dashboard queries only metrics the platform exports, and covers what SREs need."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controlplane.metrics import exported_sample_names
from tests.deploy.promql import django_prometheus_sample_names, metric_names

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/grafana/dashboards/platform.json"


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _expressions(dashboard) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["query"]["query"])
    return exprs


def test_metric_name_extraction_finds_names_and_skips_labels():
    expr = (
        "histogram_quantile(0.95, sum by (le, tenant) (max without (instance, pod) "
        '(rate(vllm:time_to_first_token_seconds_bucket{model_name=~"$model"}[5m]))))'
        " / on(tenant) django_http_x_total"
    )
    assert metric_names(expr) == {"vllm:time_to_first_token_seconds_bucket", "django_http_x_total"}
    assert metric_names("label_values(vllm:num_requests_running, model_name)") == {
        "vllm:num_requests_running"
    }


def test_every_metric_the_dashboard_queries_is_exported(redis_client, dashboard):
    exported = exported_sample_names() | django_prometheus_sample_names()
    referenced = set().union(*(metric_names(e) for e in _expressions(dashboard)))
    assert len(referenced) >= 15
    assert referenced - exported == set()


def test_the_dashboard_covers_latency_load_and_tenants(dashboard):
    exprs = _expressions(dashboard)
    joined = "\n".join(exprs)
    for histogram in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        assert re.search(rf"histogram_quantile\(0\.95, .*{histogram}_bucket", joined), histogram
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:generation_tokens_total",
        "django_http_responses_total_by_status_total",
    ):
        assert name in joined, name
    per_tenant = [e for e in exprs if "by (tenant)" in e or "by (le, tenant)" in e]
    assert any("vllm:time_to_first_token_seconds_bucket" in e for e in per_tenant)
    assert any("platform:request_cached_prompt_tokens_total" in e for e in per_tenant)


def test_panels_do_not_overlap(dashboard):
    cells = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
