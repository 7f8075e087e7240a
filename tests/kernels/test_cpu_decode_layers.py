"""The one-call decode step (kernels/cpu/decode_layers.cpp, engine.models.fused_decode)
against its reference, the per-op layer loop of engine/models/decoder.py.

The op runs the very kernels the loop calls, in its order, so hidden states and KV caches must
come out bit-identical, for every weight form and architecture switch; against the loop on
plain PyTorch ops (no native kernels) they agree to float32 rounding."""

from __future__ import annotations

import pytest
import torch

from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.layers import dispatch, quantized_linear
from engine.layers.packed_linear import PackedWeight
from engine.layers.quantized_linear import KERNEL_MAX_ROWS, Int4Weight, Int8Weight
from engine.model_config import ModelConfig
from engine.models import load_model, quantize
from engine.models.fused_decode import FusedDecode
from kernels.cpu import native_ops, unavailable_reason
from tests.support.engine_runs import CountedFusedDecode

BLOCK = 16
# (dtype, quantization, oneDNN packing allowed); int4 in both row orders, whatever this
# machine's kernel prefers (int4_kernel_interleave)
WEIGHTS = {
    "fp32": (torch.float32, None, False),
    "bf16": (torch.bfloat16, None, False),
    "bf16-packed": (torch.bfloat16, None, True),
    "int8": (torch.float32, "int8", False),
    "int4": (torch.float32, "int4", False),
    "int4-grouped": (torch.float32, "int4", False),
}
WEIGHT_TYPES = {
    "int8": Int8Weight,
    "int4": Int4Weight,
    "int4-grouped": Int4Weight,
    "bf16-packed": PackedWeight,
}
INT4_INTERLEAVE = {"int4": 1, "int4-grouped": 8}
# Context lengths after this step: one stream; then sequences decoding at the first position,
# the last of a block, the first of the next, and deeper in; then more sequences than the
# quantized matrix-vector kernels take (dequantize-then-GEMM), and fewer than threads.
SEQ_LENS = {
    "one": [17],
    "ragged": [1, 16, 17, 40],
    "wide": [5, 16, 33, 2, 48, 17, 31, 1, 64][: KERNEL_MAX_ROWS + 1],
}


@pytest.fixture(scope="module", autouse=True)
def _native():
    assert native_ops() is not None, unavailable_reason()  # this machine kind has a compiler


_models: dict = {}


def _model(checkpoints, arch: str, weights: str, monkeypatch):
    key = (arch, weights)
    if key not in _models:
        dtype, method, packing = WEIGHTS[weights]
        if not packing:
            monkeypatch.setattr(quantize, "can_pack", lambda dtype, device: False)
        elif not quantize.can_pack(dtype, torch.device("cpu")):
            pytest.skip("oneDNN has no bfloat16 kernels for this CPU")
        if weights in INT4_INTERLEAVE:
            group = INT4_INTERLEAVE[weights]
            monkeypatch.setattr(
                quantized_linear,
                "kernel_layout",
                lambda w: quantized_linear.interleave_rows(w, group),
            )
        config = ModelConfig.from_pretrained(checkpoints.get(arch))
        model = load_model(
            config,
            dtype=dtype,
            device=torch.device("cpu"),
            backend=TorchAttentionBackend(),
            quantization=method,
        )
        assert model.fused_decode is not None
        if weights in WEIGHT_TYPES:
            assert isinstance(model.layers[0].qkv, WEIGHT_TYPES[weights])
        if weights in INT4_INTERLEAVE:
            assert model.layers[0].qkv.interleave == INT4_INTERLEAVE[weights]
        _models[key] = model
    return _models[key]


def _decode_step(model, seq_lens: list[int], seed: int):
    """Random KV caches behind scattered block tables, one new token per sequence."""
    gen = torch.Generator().manual_seed(seed)
    cfg = model.config
    blocks_each = [-(-n // BLOCK) for n in seq_lens]
    num_blocks = sum(blocks_each) + 3
    shape = (num_blocks, BLOCK, cfg.num_key_value_heads, cfg.head_dim)
    caches = [
        tuple(torch.randn(shape, generator=gen).to(model.dtype) for _ in "kv") for _ in model.layers
    ]
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.zeros(len(seq_lens), max(blocks_each), dtype=torch.long)
    for i, n in enumerate(blocks_each):
        tables[i, :n] = torch.tensor(order[:n])
        order = order[n:]
    positions = torch.tensor([n - 1 for n in seq_lens])
    slots = torch.stack(
        [tables[i, p // BLOCK] * BLOCK + p % BLOCK for i, p in enumerate(positions)]
    )
    metadata = AttentionMetadata(
        slot_mapping=slots,
        seq_lens=torch.tensor(seq_lens),
        block_tables=tables,
        seq_lens_list=list(seq_lens),
        query_start_loc=list(range(len(seq_lens) + 1)),
        num_decodes=len(seq_lens),
        block_size=BLOCK,
    )
    model.backend.prepare(metadata)
    input_ids = torch.randint(0, cfg.vocab_size, (len(seq_lens),), generator=gen)
    return input_ids, positions, caches, metadata


def _forward(model, step, *, fused: bool):
    input_ids, positions, caches, metadata = step
    caches = [(k.clone(), v.clone()) for k, v in caches]
    inner = model.fused_decode
    spy = CountedFusedDecode(inner)
    model.fused_decode = spy if fused else None
    try:
        hidden = model.forward(input_ids, positions, caches, metadata)
    finally:
        model.fused_decode = inner
    assert spy.calls == (1 if fused else 0)
    return hidden, caches


@pytest.mark.parametrize("seqs", list(SEQ_LENS))
@pytest.mark.parametrize("weights", list(WEIGHTS))
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_fused_step_is_bit_identical_to_the_layer_loop(
    checkpoints, monkeypatch, arch, weights, seqs
):
    model = _model(checkpoints, arch, weights, monkeypatch)
    step = _decode_step(model, SEQ_LENS[seqs], seed=len(seqs) + len(arch))
    fused, fused_caches = _forward(model, step, fused=True)
    loop, loop_caches = _forward(model, step, fused=False)
    assert fused.dtype == model.dtype and len(fused) == len(SEQ_LENS[seqs])
    assert torch.equal(fused, loop)
    for (fk, fv), (lk, lv) in zip(fused_caches, loop_caches, strict=True):
        assert torch.equal(fk, lk) and torch.equal(fv, lv)
    # The step wrote this token's K and V (the caches started random, so a skipped write shows).
    assert not torch.equal(fused_caches[0][0], step[2][0][0])


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_fused_step_matches_plain_pytorch(checkpoints, monkeypatch, arch):
    """Against the loop with no native kernel at all (PyTorch norms, rotary, gathered SDPA)."""
    model = _model(checkpoints, arch, "fp32", monkeypatch)
    step = _decode_step(model, SEQ_LENS["ragged"], seed=3)
    fused, fused_caches = _forward(model, step, fused=True)
    monkeypatch.setattr(dispatch, "native_ops", lambda: None)
    model.backend.prepare(step[3])  # the PyTorch decode path's gather indices
    plain, plain_caches = _forward(model, step, fused=False)
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4)
    for (fk, fv), (pk, pv) in zip(fused_caches, plain_caches, strict=True):
        torch.testing.assert_close(fk, pk, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fv, pv, rtol=1e-5, atol=1e-5)


def test_steps_the_fused_path_does_not_take(checkpoints, monkeypatch):
    model = _model(checkpoints, "llama", "fp32", monkeypatch)
    input_ids, _, _, metadata = _decode_step(model, [5, 9], seed=1)
    hidden = model.embed(input_ids)
    assert model.fused_decode.can_run(hidden, metadata)
    metadata.num_decodes = 1  # the second sequence is a prefill chunk
    assert not model.fused_decode.can_run(hidden, metadata)
    metadata.num_decodes = 2
    monkeypatch.setattr(dispatch, "KERNEL_DEVICE_TYPES", ("cuda", "cpu"))  # Triton interpreter
    assert not model.fused_decode.can_run(hidden, metadata)


def test_switched_off_by_the_environment(checkpoints, monkeypatch):
    monkeypatch.setenv("PLATFORM_FUSED_DECODE", "0")
    config = ModelConfig.from_pretrained(checkpoints.get("llama"))
    model = load_model(
        config, dtype=torch.float32, device=torch.device("cpu"), backend=TorchAttentionBackend()
    )
    assert model.fused_decode is None


def test_refuses_weights_that_do_not_fit_the_layout(checkpoints, monkeypatch):
    model = _model(checkpoints, "llama", "fp32", monkeypatch)
    input_ids, positions, caches, metadata = _decode_step(model, [3], seed=2)
    fused = FusedDecode(model)
    fused.weights = fused.weights[:-1]
    with pytest.raises(RuntimeError, match="weights end before the layout"):
        fused(model.embed(input_ids), positions, caches, metadata)
    fused = FusedDecode(model)
    with pytest.raises(RuntimeError, match="K and a V cache"):
        fused(model.embed(input_ids), positions, caches[:1], metadata)


def test_a_step_on_other_caches_writes_those_caches(checkpoints, monkeypatch):
    """The caches and weights are handed to the native op once, as one object: a runner that
    hands over other caches (a new list) must have its step write them, not the first ones."""
    model = _model(checkpoints, "llama", "fp32", monkeypatch)
    input_ids, positions, caches, metadata = _decode_step(model, [3], seed=2)
    fused = FusedDecode(model)
    hidden = model.embed(input_ids)
    first = [(k.clone(), v.clone()) for k, v in caches]
    second = [(k.clone(), v.clone()) for k, v in caches]
    first_out, _ = fused(hidden, positions, first, metadata)
    untouched = [(k.clone(), v.clone()) for k, v in first]
    second_out, _ = fused(hidden, positions, second, metadata)
    assert torch.equal(first_out, second_out)
    assert not torch.equal(second[0][0], caches[0][0])  # the second step wrote its own caches
    for (k, v), (uk, uv) in zip(first, untouched, strict=True):
        assert torch.equal(k, uk) and torch.equal(v, uv)
