"""Engine test fixtures: the tiny llama checkpoint's path (helpers: tests/support/engine_runs.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_engine_path(checkpoints):
    return str(checkpoints.get("llama"))
