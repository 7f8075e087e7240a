"""Structured-output fixtures: the tiny llama's tokenizer and an engine per module
(specs and the runner: tests/support/structured_specs.py)."""

from __future__ import annotations

import pytest

from engine.text.tokenizer import ChatTokenizer
from tests.support.structured_specs import make_engine


@pytest.fixture(scope="session")
def tokenizer(tiny_engine_path):
    return ChatTokenizer(tiny_engine_path)


@pytest.fixture(scope="module")
def engine(tiny_engine_path):
    return make_engine(tiny_engine_path)
