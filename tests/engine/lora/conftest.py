"""Fixtures for LoRA tests: a tiny base checkpoint and its projection sizes."""

import pytest

from engine.lora.shapes import BaseModelShape


@pytest.fixture(scope="session")
def base_path(checkpoints):
    return checkpoints.get("llama")


@pytest.fixture(scope="session")
def base_shape(base_path):
    return BaseModelShape.from_pretrained(base_path)
