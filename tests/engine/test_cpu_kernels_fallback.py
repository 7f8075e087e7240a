"""Without the native CPU kernels (no compiler, or PLATFORM_CPU_KERNELS=0) the engine runs the
PyTorch paths and generates the same greedy tokens, quantized or not."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.layers import dispatch, quantized_linear
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from kernels.cpu import native_ops
from tests.support.engine_runs import random_prompts, run_to_completion


def _greedy(path: str, quantization: str | None) -> dict:
    engine = LLMEngine(EngineConfig(model=path, num_gpu_blocks=256, quantization=quantization))
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    # Different lengths: a batch of decodes and prefill chunks, as a served step has.
    for i, prompt in enumerate(random_prompts(6, 3, 60, seed=11)):
        engine.add_request(f"r{i}", prompt, params)
    return {key: entry["tokens"] for key, entry in run_to_completion(engine).items()}


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_the_pytorch_fallback_generates_what_the_native_kernels_do(
    tiny_engine_path, monkeypatch, quantization
):
    assert native_ops() is not None  # this machine kind builds them
    native = _greedy(tiny_engine_path, quantization)
    monkeypatch.setattr(dispatch, "native_ops", lambda: None)
    monkeypatch.setattr(quantized_linear, "native_ops", lambda: None)
    fallback = _greedy(tiny_engine_path, quantization)
    assert len(native) == 6 and all(len(tokens) == 24 for tokens in native.values())
    assert fallback == native
