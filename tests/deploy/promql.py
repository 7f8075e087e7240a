"""PromQL as the deploy files use it: the metric names an expression references, and the
sample names the platform exports (its collector's and django-prometheus's)."""

from __future__ import annotations

import re

# PromQL words that look like identifiers but are not metric names.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "label_values", "clamp_min", "clamp_max", "abs", "topk", "bottomk", "offset", "bool",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (or a label_values() query)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    expr = re.sub(r",\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)", ")", expr)  # label_values(m, label)
    identifiers = re.findall(r"(?<![\w:.$])[a-zA-Z_:][a-zA-Z0-9_:]*", expr)
    return {name for name in identifiers if name not in PROMQL_WORDS}


def django_prometheus_sample_names() -> set[str]:
    from django_prometheus.middleware import Metrics
    from prometheus_client import REGISTRY

    Metrics.get_instance()  # creates django-prometheus's HTTP metrics in REGISTRY
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("django_"):
            names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names
