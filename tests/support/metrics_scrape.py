"""Test helpers: render the platform collector and read samples back by name and labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.metrics import PlatformCollector


class Scrape:
    """One parsed exposition: ``value(name, **labels)`` and the families' TYPE lines."""

    def __init__(self, text: str):
        self.text = text
        self.types: dict[str, str] = {}
        self.samples: dict[tuple[str, frozenset], float] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def series(self, name: str) -> list[dict[str, str]]:
        return [dict(labels) for sample_name, labels in self.samples if sample_name == name]

    def buckets(self, name: str, **labels: str) -> dict[str, float]:
        """``le`` -> cumulative count of one histogram series."""
        return {
            dict(key)["le"]: value
            for (sample_name, key), value in self.samples.items()
            if sample_name == f"{name}_bucket" and {k: v for k, v in key if k != "le"} == labels
        }


def scrape() -> Scrape:
    """What /metrics would show of the vllm:* families (a private registry, fresh each time)."""
    registry = CollectorRegistry()
    registry.register(PlatformCollector())
    return Scrape(generate_latest(registry).decode())
