"""Weight-only int8/int4 linear layers against dequantize-then-matmul, on both paths: the
native kernels (a few rows, decode) and dequantize-then-GEMM (many rows, prefill), and on the
PyTorch references where the kernels cannot be built."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.layers import quantized_linear
from engine.layers.quantized_linear import (
    KERNEL_MAX_ROWS,
    dequantize,
    int4_codes,
    linear,
    quantize_int4,
    quantize_int8,
    weight_bytes,
)
from kernels.cpu.reference import int4_dequantize, pack_int4

OUT, IN = 192, 256
ROWS = [1, 3, KERNEL_MAX_ROWS + 5]  # the kernels, and the GEMM path past KERNEL_MAX_ROWS


def _weight_and_input(seed: int, rows: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(OUT, IN, generator=gen) * 0.05, torch.randn(rows, IN, generator=gen)


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, tolerance=1e-5):
    """float32 compute: within float32 rounding (or ``tolerance``), or the output's bf16 rounding."""
    tolerance = tolerance if dtype == torch.float32 else max(tolerance, 1e-2)
    scale = max(expected.float().abs().max().item(), 1.0)
    assert (actual.float() - expected.float()).abs().max().item() <= tolerance * scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("method", ["int8", "int4"])
def test_quantized_linear_matches_dequantize_then_matmul(method, dtype, rows):
    w, x = _weight_and_input(0, rows)
    q = quantize_int8(w) if method == "int8" else quantize_int4(w)
    bias = torch.randn(OUT)
    expected = F.linear(x.to(dtype).float(), dequantize(q), bias)
    actual = linear(x.to(dtype), q, bias.to(dtype))
    assert actual.shape == (rows, OUT) and actual.dtype == dtype
    # int4 decode (few rows) quantizes activations to 8 bits per block of 32, as llama.cpp does
    _close(actual, expected, dtype, 1e-2 if method == "int4" and rows <= KERNEL_MAX_ROWS else 1e-5)


@pytest.mark.parametrize("rows", [1, KERNEL_MAX_ROWS + 5])
@pytest.mark.parametrize("method", ["int8", "int4"])
def test_without_native_kernels_the_reference_runs(monkeypatch, method, rows):
    w, x = _weight_and_input(1, rows)
    q = quantize_int8(w) if method == "int8" else quantize_int4(w)
    expected = linear(x, q)  # the native kernels
    monkeypatch.setattr(quantized_linear, "native_ops", lambda: None)
    _close(linear(x, q), expected, torch.float32)


def test_quantized_weights_stay_close_to_the_float_weights():
    w, _ = _weight_and_input(2)
    # int8: half a step of the row's scale
    err = (dequantize(quantize_int8(w)) - w).abs()
    assert (err <= w.abs().amax(1, keepdim=True) / 254 * 1.01).all()
    # int4: half a step of the block's (max - min) / 15, plus float16 rounding of scale and min
    blocks = w.reshape(OUT, -1, 32)
    step = (blocks.amax(-1) - blocks.amin(-1)) / 15
    err = (dequantize(quantize_int4(w)) - w).abs().reshape(OUT, -1, 32)
    assert (err <= step[..., None] * 0.51 + 1e-3 * blocks.abs().amax(-1, keepdim=True)).all()


def test_int4_keeps_q4_1_weights_exactly():
    """Weights on GGUF's Q4_1 grid (float16 d and m, d * q + m per block of 32, codes 0 and 15
    present, as llama.cpp makes them) come back unchanged: a GGUF checkpoint is served on its
    own values."""
    gen = torch.Generator().manual_seed(2)
    blocks = OUT * IN // 32
    d = (torch.rand(blocks, 1, generator=gen) * 0.01 + 1e-3).half().float()
    m = (-torch.rand(blocks, 1, generator=gen) * 0.1).half().float()
    q = torch.randint(0, 16, (blocks, 32), generator=gen)
    q[:, 0], q[:, 1] = 0, 15
    w = (d * q + m).reshape(OUT, IN)
    codes, scale, mins = int4_codes(w)
    assert torch.equal(codes.reshape(blocks, 32), q.to(torch.uint8))
    torch.testing.assert_close(int4_dequantize(pack_int4(codes), scale, mins), w, atol=1e-7, rtol=0)
    torch.testing.assert_close(dequantize(quantize_int4(w)), w, atol=1e-7, rtol=0)


def test_quantized_weights_take_a_fraction_of_the_bytes():
    w, _ = _weight_and_input(3)
    full = weight_bytes(w)  # fp32: 32 bits a weight
    assert weight_bytes(quantize_int8(w)) < full / 3.9  # 8 bits + a scale a row
    # 4 bits + a float16 scale and min per 32 weights = 5 bits, as in a Q4_1 file
    assert weight_bytes(quantize_int4(w)) == full * 5 / 32


def test_int4_refuses_a_width_no_group_divides():
    with pytest.raises(ValueError, match="multiple of group"):
        quantize_int4(torch.randn(64, 48))
