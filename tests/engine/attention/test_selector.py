"""Which attention backend the engine gets, and the errors for ones that cannot run."""

from __future__ import annotations

import pytest

from engine.attention import get_attention_backend
from engine.config import EngineConfig


def test_auto_on_cpu_is_the_torch_backend():
    assert get_attention_backend("cpu").name == "torch"
    assert get_attention_backend("cpu", "auto").name == "torch"


def test_torch_can_be_forced():
    assert get_attention_backend("cpu", "torch").name == "torch"


def test_triton_on_cpu_without_the_interpreter_says_why(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        get_attention_backend("cpu", "triton")


def test_triton_on_cpu_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert get_attention_backend("cpu", "triton").name == "triton"


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown attention backend 'flash'"):
        get_attention_backend("cpu", "flash")


def test_engine_config_accepts_triton_and_rejects_others(tiny_engine_path):
    assert EngineConfig(model=tiny_engine_path, attention_backend="triton").attention_backend
    with pytest.raises(ValueError, match="attention_backend must be"):
        EngineConfig(model=tiny_engine_path, attention_backend="flash")
