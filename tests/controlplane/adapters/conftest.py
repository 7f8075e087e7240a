"""Fixtures for adapter tests: a served tiny base model and adapter directories for it."""

from __future__ import annotations

import json

import pytest

from controlplane.adapters import serving
from controlplane.deployments.models import ServedModel
from engine.tooling.random_lora import make_random_adapter


@pytest.fixture
def base_model(db, tiny_llama):
    return ServedModel.objects.create(
        name="tiny-llama", path=str(tiny_llama), architecture="LlamaForCausalLM"
    )


@pytest.fixture(autouse=True)
def _upload_dir(settings, tmp_path):
    settings.ADAPTER_UPLOAD_DIR = str(tmp_path / "uploads")


@pytest.fixture(autouse=True)
def _fresh_engine_statuses():
    """The admin caches engine statuses for a second; each test starts without."""
    serving.forget_cached_statuses()


@pytest.fixture
def adapter_dir(tiny_llama, tmp_path):
    """A valid rank-8 adapter for the tiny llama, on q and v."""
    return make_random_adapter(tiny_llama, tmp_path / "good", rank=8, targets=("q_proj", "v_proj"))


@pytest.fixture
def wrong_shape_dir(tiny_llama, tmp_path):
    """An adapter made for a wider model (hidden size 96) than the tiny llama (64)."""
    config = json.loads((tiny_llama / "config.json").read_text())
    config.update(hidden_size=96, head_dim=24)
    other = tmp_path / "wider-base"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(config))
    return make_random_adapter(other, tmp_path / "wrong", rank=8, targets=("q_proj",))
