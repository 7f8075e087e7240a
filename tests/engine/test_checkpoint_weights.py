"""The loader reads a checkpoint's tensors one at a time: mapped (zero-copy on the file's
pages) for models that keep float weights, or copied with plain reads for models that convert
their weights while loading (quantized or packed), so the file's pages never count against
the engine."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from engine.attention.selector import get_attention_backend
from engine.layers.quantized_linear import (
    Int4Weight,
    Int8Weight,
    kernel_layout,
    quantize_int4,
    quantize_int8,
)
from engine.model_config import ModelConfig
from engine.models.loader import CheckpointWeights, load_model

TENSORS = {
    "a.f32": torch.randn(3, 5),
    "b.bf16": torch.randn(4, 2).to(torch.bfloat16),
    "c.f16": torch.randn(7).to(torch.float16),
    "d.i8": torch.randint(-128, 127, (2, 9), dtype=torch.int8),
    "e.i64": torch.arange(6).reshape(2, 3),
    "f.empty": torch.zeros(0, 4),
}


@pytest.mark.parametrize("mapped", [True, False])
def test_both_ways_read_every_tensor_exactly(tmp_path, mapped):
    save_file(dict(list(TENSORS.items())[:3]), str(tmp_path / "model-1.safetensors"))
    save_file(dict(list(TENSORS.items())[3:]), str(tmp_path / "model-2.safetensors"))
    weights = CheckpointWeights(tmp_path, mapped=mapped)
    assert sorted(weights) == sorted(TENSORS) and len(weights) == len(TENSORS)
    for name, expected in TENSORS.items():
        got = weights[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert torch.equal(got, expected), name


def test_a_truncated_file_is_a_clear_error(tmp_path):
    save_file({"w": torch.randn(64, 64)}, str(tmp_path / "model.safetensors"))
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(ValueError, match="ends inside tensor 'w'"):
        CheckpointWeights(tmp_path, mapped=False)["w"]


def test_int8_quantizes_in_row_chunks_as_it_would_whole():
    weight = torch.randn(9000, 16)  # more rows than one chunk
    chunked = quantize_int8(weight)
    scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    whole = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    assert torch.equal(chunked.qweight, whole) and torch.equal(chunked.scales, scales)


def test_an_int4_model_keeps_no_float_projection_and_matches_quantizing_after(tiny_llama):
    config = ModelConfig.from_pretrained(tiny_llama)
    backend = get_attention_backend("cpu")
    cpu = torch.device("cpu")
    model = load_model(
        config, dtype=torch.float32, device=cpu, backend=backend, quantization="int4"
    )
    floats = load_model(config, dtype=torch.float32, device=cpu, backend=backend)
    for layer, float_layer in zip(model.layers, floats.layers, strict=True):
        for name in ("qkv", "o_proj", "gate_up", "down"):
            weight = getattr(layer, name)
            assert isinstance(weight, Int4Weight), name
            # The same codes as quantizing the float model after it loaded (the old way), in
            # the row order this machine's kernel reads.
            after = kernel_layout(quantize_int4(getattr(float_layer, name)))
            assert weight.interleave == after.interleave, name
            assert torch.equal(weight.packed, after.packed), name
            assert torch.equal(weight.scales, after.scales), name
            assert torch.equal(weight.mins, after.mins), name
    assert isinstance(model.lm_head, Int8Weight)
