"""Fixtures of the model registration tests."""

from __future__ import annotations

import pytest

from controlplane.deployments import registration


@pytest.fixture
def recorded(monkeypatch):
    """Every write the registration makes on the row, in order (the real writes still run)."""
    writes: list[dict] = []
    record = registration._record

    def spy(model_id, **fields):
        writes.append(fields)
        record(model_id, **fields)

    monkeypatch.setattr(registration, "_record", spy)
    return writes
