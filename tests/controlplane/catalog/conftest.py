"""Fixtures for served-model tests: a small catalog to look at (tests/conftest.py empties the
per-process catalog cache around every test)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.adapters.services import adapter_register
from controlplane.adapters.tasks import validate_adapter
from controlplane.deployments.services import served_model_register
from engine.tooling.random_lora import make_random_adapter


@pytest.fixture
def served(tiny_llama, tmp_path, settings, make_tenant):
    """The tiny llama served as "tiny-llama", tenants A and B, and the ready adapter "bot"
    on it, granted to A."""
    settings.ADAPTER_UPLOAD_DIR = str(tmp_path / "uploads")
    base = served_model_register(path=tiny_llama, name="tiny-llama")
    tenant_a, tenant_b = make_tenant("A"), make_tenant("B")
    adapter = adapter_register(
        path=make_random_adapter(tiny_llama, tmp_path / "bot", rank=8),
        name="bot",
        base=base,
        tenants=[tenant_a],
        enqueue=False,
    )
    assert validate_adapter(adapter.pk) == "ready"
    return SimpleNamespace(base=base, tenant_a=tenant_a, tenant_b=tenant_b, adapter=adapter)
