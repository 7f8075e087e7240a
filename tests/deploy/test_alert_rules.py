"""deploy/prometheus/alerts.yml: rules Prometheus loads (every expression parses as PromQL),
on series the platform exports (an alert on a missing series never fires), each with what an
operator on call needs; compose loads them, and Kubernetes gets the same groups."""

from __future__ import annotations

import re
from pathlib import Path

import promql_parser
import pytest
import yaml

from controlplane.metrics import exported_sample_names
from tests.deploy.promql import django_prometheus_sample_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# Series Prometheus itself makes for every target.
SCRAPE_SERIES = {"up"}
DURATION = re.compile(r"^\d+[smh]$")


@pytest.fixture(scope="module")
def groups() -> list[dict]:
    return yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())["groups"]


def _rules(groups) -> list[dict]:
    return [rule for group in groups for rule in group["rules"]]


def selectors(node) -> list:
    """Every vector selector in a parsed expression (promql_parser's AST)."""
    if isinstance(node, promql_parser.VectorSelector):
        return [node]
    found = []
    for attribute in ("lhs", "rhs", "expr", "param", "vector_selector"):
        child = getattr(node, attribute, None)
        if child is not None:
            found += selectors(child)
    for argument in getattr(node, "args", None) or ():
        found += selectors(argument)
    return found


def test_selector_walk_finds_every_series_of_an_expression():
    expr = promql_parser.parse(
        'histogram_quantile(0.95, sum by (le) (rate(a_bucket{x="1"}[5m]))) > on() '
        "absent(b) and topk(3, -c) unless max_over_time(d[5m:1m] offset 1m)"
    )
    assert sorted(s.name for s in selectors(expr)) == ["a_bucket", "b", "c", "d"]


def test_every_rule_parses_and_says_what_to_do(groups):
    rules = _rules(groups)
    assert len(rules) >= 8
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        promql_parser.parse(rule["expr"])  # ValueError for what Prometheus would refuse
        assert DURATION.match(rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_a_broken_expression_is_caught():
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(vllm:generation_tokens_total[5m])")


def test_every_series_the_rules_read_is_exported(redis_client, groups):
    exported = exported_sample_names() | django_prometheus_sample_names() | SCRAPE_SERIES
    read = {s.name for r in _rules(groups) for s in selectors(promql_parser.parse(r["expr"]))}
    assert {"platform:fleet_nodes", "vllm:time_to_first_token_seconds_bucket"} <= read
    assert read - exported == set()


def test_fleet_wide_series_are_collapsed_across_api_processes(groups):
    """Every API process renders the same vllm:* and platform:* totals: summed as they are,
    three web pods would read three times the preemptions, or hide a missing replica."""
    for rule in _rules(groups):
        expr = rule["expr"]
        for name in re.findall(r"(?:vllm|platform):\w+", expr):
            if rule["alert"] == "LLMPlatformRedisUnreadable":
                continue  # absent() of any copy is what it asks
            assert "max without (instance, pod)" in expr, (rule["alert"], name)


def test_the_up_rules_select_the_job_both_deployments_name(groups):
    compose = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    (job,) = [j["job_name"] for j in compose["scrape_configs"]]
    monitor = yaml.safe_load((DEPLOY / "k8s/servicemonitor.yaml").read_text())
    service = next(
        doc
        for doc in yaml.safe_load_all((DEPLOY / "k8s/web.yaml").read_text())
        if doc["kind"] == "Service"
    )
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == job
    for rule in _rules(groups):
        for selector in selectors(promql_parser.parse(rule["expr"])):
            if selector.name == "up":
                assert f'job="{job}"' in rule["expr"], rule["alert"]


def test_compose_loads_the_rules_and_kubernetes_gets_the_same_groups(groups):
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    mounts = dict(
        reversed(m.removesuffix(":ro").split(":"))
        for m in compose["services"]["prometheus"]["volumes"]
    )
    config = yaml.safe_load((DEPLOY / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    (rule_file,) = config["rule_files"]
    assert (DEPLOY / mounts[rule_file]).resolve() == (DEPLOY / "prometheus/alerts.yml").resolve()
    rule = yaml.safe_load((DEPLOY / "k8s/prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"] == groups
