"""The loader reads a checkpoint's tensors one at a time: mapped (zero-copy on the file's
pages) for models that keep float weights, or copied with plain reads for models that convert
their weights while loading (quantized or packed), so the file's pages never count against
the engine."""

from __future__ import annotations

import json
import shutil

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


def _load_on_cpu(checkpoint, quantization=None):
    """The checkpoint's model in float32 on the CPU, its weights ``quantization`` (or float)."""
    return load_model(
        ModelConfig.from_pretrained(checkpoint),
        dtype=torch.float32,
        device=torch.device("cpu"),
        backend=get_attention_backend("cpu"),
        quantization=quantization,
    )


def test_an_int4_model_keeps_no_float_projection_and_matches_quantizing_after(tiny_llama):
    model = _load_on_cpu(tiny_llama, "int4")
    floats = _load_on_cpu(tiny_llama)
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


def test_an_embedding_table_left_in_its_file_reads_the_rows_asked_for(tmp_path):
    """A quantized model's embedding table stays in the checkpoint file (file_rows.py): its
    lookups equal F.embedding's, and the table's memory is not the engine's."""
    table = torch.randn(4096, 96)
    save_file({"x": torch.randn(3), "emb": table}, str(tmp_path / "model.safetensors"))
    weights = CheckpointWeights(tmp_path, mapped=False)
    rows = weights.file_rows("emb", torch.float32, torch.device("cpu"))
    ids = torch.tensor([[5, 4095], [0, 5]])
    assert torch.equal(rows.lookup(ids), torch.nn.functional.embedding(ids, table))
    assert rows.lookup(torch.tensor([], dtype=torch.long)).shape == (0, 96)
    with pytest.raises(IndexError, match="4096 is out of range"):
        rows.lookup(torch.tensor([1, 4096]))
    # Not offered where it would not pay: another dtype (the engine converts the table
    # anyway), mapped weights (on the file's pages already), a GPU, a missing name.
    assert weights.file_rows("emb", torch.bfloat16, torch.device("cpu")) is None
    assert weights.file_rows("emb", torch.float32, torch.device("cuda")) is None
    assert weights.file_rows("nope", torch.float32, torch.device("cpu")) is None
    mapped = CheckpointWeights(tmp_path, mapped=True)
    assert mapped.file_rows("emb", torch.float32, torch.device("cpu")) is None


def test_a_quantized_model_embeds_from_its_file_as_the_float_model_does(tiny_llama):
    quantized = _load_on_cpu(tiny_llama, "int8")
    floats = _load_on_cpu(tiny_llama)
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    assert not isinstance(quantized.embed_tokens, torch.Tensor)  # left in the file
    assert torch.equal(quantized.embed(ids), floats.embed(ids))


def test_a_tied_lm_head_is_quantized_from_the_table_left_in_the_file(tiny_llama, tmp_path):
    from safetensors.torch import load_file

    tied = tmp_path / "tied"
    shutil.copytree(tiny_llama, tied)
    config_json = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**config_json, "tie_word_embeddings": True}))
    (file,) = tied.glob("*.safetensors")
    tensors = load_file(str(file))
    del tensors["lm_head.weight"]
    save_file(tensors, str(file))
    table = tensors["model.embed_tokens.weight"]
    model = _load_on_cpu(tied, "int4")
    expected = quantize_int8(table)
    assert torch.equal(model.lm_head.qweight, expected.qweight)
    assert torch.equal(model.lm_head.scales, expected.scales)
    assert torch.equal(model.embed(torch.arange(len(table))), table)


class _CountingWeights(dict):
    """Mapped weights that say which tensors were read into memory of their own."""

    mapped = True

    def __init__(self, tensors):
        super().__init__(tensors)
        self.read_names: list[str] = []

    def read(self, name):
        self.read_names.append(name)
        return self[name].clone()


def test_a_mapped_model_reads_what_it_only_copies_from_and_keeps_the_rest_mapped(tmp_path):
    """q, k, v (concatenated into one projection) and a tensor converted to another dtype are
    read with plain reads: their pages of the file's map would stay resident for nothing (a
    float32 SmolLM2 held 270 MiB of them); a tensor kept as it is stays on the map."""
    from engine.models.decoder import _WeightTaker

    weights = _CountingWeights(
        {"q": torch.randn(2, 4), "k": torch.randn(2, 4), "o": torch.randn(4, 4)}
    )
    weights["b"] = torch.randn(4).to(torch.bfloat16)
    take = _WeightTaker(weights, torch.float32, torch.device("cpu"))
    assert torch.equal(take.cat("q", "k"), torch.cat([weights["q"], weights["k"]]))
    assert take("o") is weights["o"]  # the mapped tensor itself
    assert torch.equal(take("b"), weights["b"].float())
    assert weights.read_names == ["q", "k", "b"]

    # CheckpointWeights.read: the same values, mapped or not.
    save_file(dict(list(TENSORS.items())[:3]), str(tmp_path / "model.safetensors"))
    for mapped in (True, False):
        ckpt = CheckpointWeights(tmp_path, mapped=mapped)
        for name in list(TENSORS)[:3]:
            assert torch.equal(ckpt.read(name), TENSORS[name])
