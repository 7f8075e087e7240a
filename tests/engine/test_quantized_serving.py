"""Serving with ``quantization="int8" | "int4"``: close to the float model, LoRA refused clearly,
and the real SmolLM2 still answers."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.models.quantize import check_quantization
from engine.sampling_params import SamplingParams
from engine.text.tokenizer import ChatTokenizer
from engine.tooling.random_lora import make_random_adapter
from tests.support.engine_runs import random_prompts, run_to_completion


def _prompt_logprobs(path, quantization, prompt):
    engine = LLMEngine(EngineConfig(model=path, num_gpu_blocks=256, quantization=quantization))
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    engine.add_request("r", prompt, params)
    [entry] = run_to_completion(engine).values()
    lps = [d.prompt_logprobs for d in entry["deltas"] if d.prompt_logprobs]
    return torch.tensor([lp.logprob for lp in lps[0] if lp is not None])


@pytest.mark.parametrize(("quantization", "tolerance"), [("int8", 0.1), ("int4", 0.6)])
def test_quantized_model_scores_prompts_like_the_float_model(
    tiny_engine_path, quantization, tolerance
):
    """The logprob the model gives each next prompt token barely moves under quantization, and
    moves at all (the quantized weights are what runs)."""
    prompt = random_prompts(1, 40, 40, seed=7)[0]
    full = _prompt_logprobs(tiny_engine_path, None, prompt)
    quant = _prompt_logprobs(tiny_engine_path, quantization, prompt)
    assert quant.shape == full.shape == (39,)
    diff = (quant - full).abs()
    assert diff.max().item() < tolerance
    assert diff.max().item() > 0


def test_lora_on_a_quantized_base_is_refused_with_the_reason(tiny_engine_path, tmp_path):
    engine = LLMEngine(
        EngineConfig(model=tiny_engine_path, num_gpu_blocks=256, quantization="int8")
    )
    adapter = make_random_adapter(tiny_engine_path, tmp_path / "adapter")
    with pytest.raises(ValueError, match="int8-quantized base are not supported"):
        engine.load_adapter("ad", str(adapter))


def test_quantization_is_refused_off_the_cpu_and_for_unknown_methods():
    with pytest.raises(ValueError, match="CPU kernels only"):
        check_quantization("int4", torch.device("cuda"))
    with pytest.raises(ValueError, match="quantization must be"):
        EngineConfig(model="m", quantization="fp8")


@pytest.mark.slow
@pytest.mark.timeout(900)  # converting the GGUF takes minutes on a loaded machine
def test_int8_smollm2_answers_the_capital_of_france(smollm2):
    """int8 only: the fp32 model's first token is a near tie ("The" -1.88 against "L" -1.97),
    which int4 (like any 4-bit file) may tip; bench/quant_quality.py reports both."""
    path, _lines = smollm2
    quantization = "int8"
    tokenizer = ChatTokenizer(path)
    prompt = tokenizer.encode(
        tokenizer.render_chat([{"role": "user", "content": "What is the capital of France?"}])
    )
    engine = LLMEngine(
        EngineConfig(model=str(path), max_model_len=256, max_num_seqs=1, quantization=quantization)
    )
    engine.add_request("q", prompt, SamplingParams(temperature=0.0, max_tokens=24))
    [entry] = run_to_completion(engine).values()
    assert "Paris" in tokenizer.decode(entry["tokens"])


@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
def test_decode_read_bytes_counts_every_weight_but_the_embedding_table(
    tiny_engine_path, quantization
):
    """The roofline's denominator (bench/cpu_vs_llamacpp.py): in float32 it is the checkpoint's
    bytes less the embedding table; quantized, the projections shrink (int8 about 4x, int4
    about 6x with their scales) and the norms stay."""
    from safetensors import safe_open

    from engine.models.quantize import decode_read_bytes

    engine = LLMEngine(
        EngineConfig(model=tiny_engine_path, num_gpu_blocks=256, quantization=quantization)
    )
    with safe_open(f"{tiny_engine_path}/model.safetensors", "pt") as f:
        sizes = {name: f.get_tensor(name).nbytes for name in f.keys()}  # noqa: SIM118
    checkpoint = sum(sizes.values()) - sizes["model.embed_tokens.weight"]
    read = decode_read_bytes(engine.runner.model)
    if quantization is None:
        assert read == checkpoint
    else:
        assert checkpoint / 8 < read < checkpoint / 2.5
