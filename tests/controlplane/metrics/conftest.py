"""Fixtures for the /metrics access tests."""

from __future__ import annotations

import pytest

from tests.support.metrics_access import TOKEN, record_tenant_traffic


@pytest.fixture
def metrics_token(settings) -> str:
    """METRICS_BEARER_TOKEN, as a deployment sets it."""
    settings.METRICS_BEARER_TOKEN = TOKEN
    return TOKEN


@pytest.fixture
async def tenant_traffic(redis_client) -> None:
    await record_tenant_traffic(redis_client)
