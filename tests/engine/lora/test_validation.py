"""Adapter validation against a base model: what is accepted, and readable refusals."""

from __future__ import annotations

import json
import math

import pytest
from safetensors.torch import load_file, save_file

from engine.lora.validation import AdapterError, adapter_checksum, inspect_adapter
from engine.tooling.random_lora import make_random_adapter


def _edit_config(path, **changes):
    config = json.loads((path / "adapter_config.json").read_text())
    config.update(changes)
    (path / "adapter_config.json").write_text(json.dumps(config))


def test_valid_adapter_spec(base_path, base_shape, tmp_path):
    path = make_random_adapter(
        base_path, tmp_path / "a", rank=4, targets=("v_proj", "q_proj", "down_proj")
    )
    spec = inspect_adapter(path, base_shape, max_lora_rank=8)
    assert spec.rank == 4
    assert spec.scaling == 2.0
    assert spec.target_modules == ("q_proj", "v_proj", "down_proj")
    assert spec.layers == (0, 1)
    assert len(spec.checksum) == 64
    assert spec.checksum == adapter_checksum(path)


def test_rslora_scaling(base_path, base_shape, tmp_path):
    path = make_random_adapter(base_path, tmp_path / "a", rank=16, lora_alpha=8, use_rslora=True)
    assert inspect_adapter(path, base_shape).scaling == pytest.approx(8 / math.sqrt(16))


def test_checksum_changes_with_weights_and_config(base_path, tmp_path):
    one = adapter_checksum(make_random_adapter(base_path, tmp_path / "a", seed=1))
    two = adapter_checksum(make_random_adapter(base_path, tmp_path / "b", seed=2))
    assert one != two
    _edit_config(tmp_path / "a", lora_alpha=3)
    assert adapter_checksum(tmp_path / "a") != one


def test_wrong_shape_is_refused_with_the_module_and_sizes(base_path, base_shape, tmp_path):
    path = make_random_adapter(base_path, tmp_path / "a", rank=4, targets=("q_proj",))
    tensors = load_file(path / "adapter_model.safetensors")
    key = "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"
    tensors[key] = tensors[key][:48].contiguous()  # a base with a smaller hidden size
    save_file(tensors, path / "adapter_model.safetensors")
    with pytest.raises(
        AdapterError, match=r"layer 1 q_proj.lora_B has shape \[48, 4\], expected \[64, 4\]"
    ):
        inspect_adapter(path, base_shape)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"r": 128}, "rank 128 exceeds the engine's max_lora_rank 64"),
        ({"target_modules": ["q_proj", "embed_tokens"]}, "embed_tokens are not supported"),
        ({"use_dora": True}, "DoRA"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"peft_type": "IA3"}, "only LORA"),
        ({"bias": "all"}, "bias='all'"),
        ({"rank_pattern": {"q_proj": 2}}, "rank_pattern"),
    ],
)
def test_unsupported_configs_are_refused(base_path, base_shape, tmp_path, changes, message):
    path = make_random_adapter(base_path, tmp_path / "a", rank=4)
    _edit_config(path, **changes)
    with pytest.raises(AdapterError, match=message):
        inspect_adapter(path, base_shape)


def test_rank_in_config_must_match_weights(base_path, base_shape, tmp_path):
    path = make_random_adapter(base_path, tmp_path / "a", rank=4)
    _edit_config(path, r=8)
    with pytest.raises(AdapterError, match="expected"):
        inspect_adapter(path, base_shape)


def test_adapter_for_a_deeper_model_is_refused(base_path, base_shape, tmp_path):
    path = make_random_adapter(base_path, tmp_path / "a", rank=4, targets=("o_proj",))
    tensors = load_file(path / "adapter_model.safetensors")
    for which in "AB":
        src = f"base_model.model.model.layers.1.self_attn.o_proj.lora_{which}.weight"
        tensors[src.replace("layers.1", "layers.5")] = tensors[src].clone()
    save_file(tensors, path / "adapter_model.safetensors")
    with pytest.raises(AdapterError, match="layer 5 but the base model has 2 layers"):
        inspect_adapter(path, base_shape)


def test_missing_or_foreign_files(base_path, base_shape, tmp_path):
    with pytest.raises(AdapterError, match="not a directory"):
        inspect_adapter(tmp_path / "nothing", base_shape)
    path = make_random_adapter(base_path, tmp_path / "a", rank=4)
    (path / "adapter_model.safetensors").rename(path / "adapter_model.bin")
    with pytest.raises(AdapterError, match="pickle"):
        inspect_adapter(path, base_shape)
    (path / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(AdapterError, match="not a safetensors file"):
        inspect_adapter(path, base_shape)
    (path / "adapter_config.json").write_text("{nope")
    with pytest.raises(AdapterError, match="not valid JSON"):
        inspect_adapter(path, base_shape)


def test_missing_b_half(base_path, base_shape, tmp_path):
    path = make_random_adapter(base_path, tmp_path / "a", rank=4, targets=("up_proj",))
    tensors = load_file(path / "adapter_model.safetensors")
    del tensors["base_model.model.model.layers.0.mlp.up_proj.lora_B.weight"]
    save_file(tensors, path / "adapter_model.safetensors")
    with pytest.raises(AdapterError, match="layer 0 up_proj has no lora_B"):
        inspect_adapter(path, base_shape)


def test_validation_does_not_import_torch(base_path, tmp_path):
    """The control plane's worker validates uploads without loading torch."""
    import subprocess
    import sys

    path = make_random_adapter(base_path, tmp_path / "a", rank=4)
    code = (
        "import sys\n"
        "from engine.lora.shapes import BaseModelShape\n"
        "from engine.lora.validation import inspect_adapter\n"
        f"spec = inspect_adapter({str(path)!r}, BaseModelShape.from_pretrained({str(base_path)!r}))\n"
        "assert spec.rank == 4\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
