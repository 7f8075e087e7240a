"""Greedy generation with the one-call decode step (engine.models.fused_decode) is token for
token what the per-op layer loop generates, on the tiny checkpoints of each architecture."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.engine_runs import CountedFusedDecode, random_prompts, run_to_completion


def _greedy(path: str, dtype: str, quantization: str | None) -> tuple[dict, LLMEngine, int]:
    # No speculation: its verification steps take this path too, but they make the count of
    # fused steps depend on how many drafts the random model's output accepts.
    config = EngineConfig(
        model=path,
        dtype=dtype,
        quantization=quantization,
        num_gpu_blocks=256,
        enable_speculative_decoding=False,
    )
    engine = LLMEngine(config)
    model = engine.runner.model
    if model.fused_decode is not None:
        model.fused_decode = CountedFusedDecode(model.fused_decode)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    # Different lengths, crossing block boundaries while they decode side by side; the
    # requests finish at once, so later steps are decode-only batches of several sequences.
    for i, prompt in enumerate(random_prompts(5, 3, 40, seed=21)):
        engine.add_request(f"r{i}", prompt, params)
    tokens = {key: entry["tokens"] for key, entry in run_to_completion(engine).items()}
    fused_steps = model.fused_decode.calls if model.fused_decode is not None else 0
    return tokens, engine, fused_steps


@pytest.mark.parametrize(
    ("arch", "dtype", "quantization"),
    [
        ("llama", "float32", None),
        ("qwen2", "float32", None),
        ("qwen3", "float32", None),
        ("llama", "float32", "int4"),
        ("qwen3", "bfloat16", None),
    ],
)
def test_fused_decode_generates_what_the_layer_loop_does(
    checkpoints, monkeypatch, arch, dtype, quantization
):
    path = str(checkpoints.get(arch))
    fused, _, fused_steps = _greedy(path, dtype, quantization)
    assert fused_steps >= 35  # 39 decode steps after the prompts' step
    monkeypatch.setenv("PLATFORM_FUSED_DECODE", "0")
    loop, engine, _ = _greedy(path, dtype, quantization)
    assert engine.runner.model.fused_decode is None
    assert len(loop) == 5 and all(len(t) == 40 for t in loop.values())
    assert fused == loop
