"""The CPU KV cache is sized from PLATFORM_CPU_KVCACHE_SPACE, the engine setting, or available
memory, and the engine says what it allocated when it starts."""

from __future__ import annotations

import logging

import pytest
import torch

from engine.__main__ import build_parser
from engine.args import engine_config_from_args
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model_config import ModelConfig
from engine.worker import kv_cache
from engine.worker.kv_cache import (
    CPU_KVCACHE_SPACE_ENV,
    bytes_per_block,
    cpu_kv_cache_budget,
    num_blocks_for,
)

CPU = torch.device("cpu")


def _blocks(path, monkeypatch, env: str | None, **config) -> tuple[int, int]:
    if env is None:
        monkeypatch.delenv(CPU_KVCACHE_SPACE_ENV, raising=False)
    else:
        monkeypatch.setenv(CPU_KVCACHE_SPACE_ENV, env)
    cfg = EngineConfig(model=path, max_num_seqs=100_000, **config)
    model_config = ModelConfig.from_pretrained(path)
    per_block = bytes_per_block(model_config, cfg.block_size, torch.float32)
    return num_blocks_for(cfg, model_config, torch.float32, CPU), per_block


def test_the_env_var_sets_the_budget_in_gib(tiny_engine_path, monkeypatch):
    blocks, per_block = _blocks(tiny_engine_path, monkeypatch, "0.25")
    assert blocks == (2**30 // 4) // per_block
    smaller, _ = _blocks(tiny_engine_path, monkeypatch, "0.125")
    assert smaller == blocks // 2


def test_the_engine_setting_wins_over_the_env_var(tiny_engine_path, monkeypatch):
    blocks, per_block = _blocks(tiny_engine_path, monkeypatch, "0.25", cpu_kv_cache_bytes=2**26)
    assert blocks == 2**26 // per_block


def test_a_bad_env_value_is_refused_with_its_name(tiny_engine_path, monkeypatch):
    with pytest.raises(ValueError, match=f"{CPU_KVCACHE_SPACE_ENV} must be a positive number"):
        _blocks(tiny_engine_path, monkeypatch, "lots")


GIB = 2**30


@pytest.mark.parametrize(
    ("available_gib", "one_sequence_gib", "expected_gib"),
    [
        (40, 0, 4),  # a tenth, capped at 4 GiB
        (20, 0, 2),  # a tenth
        (6, 0, 1),  # a tenth is 0.6 GiB: the 1 GiB floor
        (6, 2, 2),  # one max_model_len sequence needs 2 GiB: it still starts
        (1.5, 0, 0.75),  # the floor never takes more than half of what is available
    ],
)
def test_by_default_a_tenth_of_available_memory_between_a_floor_and_4_gib(
    monkeypatch, available_gib, one_sequence_gib, expected_gib
):
    monkeypatch.delenv(CPU_KVCACHE_SPACE_ENV, raising=False)
    monkeypatch.setattr(kv_cache, "available_memory_bytes", lambda: int(available_gib * GIB))
    budget, source = cpu_kv_cache_budget(EngineConfig(model="m"), int(one_sequence_gib * GIB))
    assert budget == int(expected_gib * GIB)
    assert f"{available_gib:.1f} GiB available" in source


def test_the_engine_logs_the_cache_it_allocated(tiny_engine_path, monkeypatch, caplog):
    monkeypatch.setenv(CPU_KVCACHE_SPACE_ENV, "0.0625")
    with caplog.at_level(logging.INFO, logger="engine"):
        engine = LLMEngine(EngineConfig(model=tiny_engine_path, device="cpu", max_num_seqs=4096))
    blocks = engine.runner.num_blocks
    text = caplog.text
    assert f"CPU KV cache budget 0.06 GiB ({CPU_KVCACHE_SPACE_ENV})" in text
    assert f"KV cache: {blocks} blocks x 16 tokens = {blocks * 16} tokens" in text


def test_the_command_line_passes_quantization_and_kv_space():
    argv = "--model-path p --model-name m --quantization int4 --cpu-kv-cache-space 2"
    args = build_parser().parse_args([*argv.split(), "--cpu-threads", "1"])
    config = engine_config_from_args(args, "p")
    assert config.quantization == "int4"
    assert config.cpu_kv_cache_bytes == 2 * 2**30
    assert config.cpu_threads == 1
