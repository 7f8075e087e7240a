"""Weight-only int8/int4 linear layers: torch's CPU kernels against dequantize-then-matmul."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.layers.quantized_linear import (
    dequantize_int4_codes,
    dequantize_int8,
    int4_codes,
    linear,
    quantize_int4,
    quantize_int8,
    weight_bytes,
)

OUT, IN = 192, 256


def _weight_and_input(seed: int, rows: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(OUT, IN, generator=gen) * 0.05, torch.randn(rows, IN, generator=gen)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Within bf16 rounding (the kernels compute in bf16) of the output's scale."""
    scale = expected.float().abs().max().item()
    assert (actual.float() - expected.float()).abs().max().item() <= 2e-2 * max(scale, 1.0)


def _bf16(x: torch.Tensor) -> torch.Tensor:
    """``x`` as the kernels see it: rounded to bf16, then widened again."""
    return x.to(torch.bfloat16).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7])
def test_int8_kernel_matches_dequantize_then_matmul(dtype, rows):
    w, x = _weight_and_input(0, rows)
    q = quantize_int8(w)
    bias = torch.randn(OUT)
    expected = F.linear(_bf16(x), dequantize_int8(q).float(), bias)
    actual = linear(x.to(dtype), q, bias.to(dtype))
    assert actual.shape == (rows, OUT) and actual.dtype == dtype
    _close(actual, expected)
    # and the quantization itself is close to the float weight (half a step, within bf16 scales)
    err = (dequantize_int8(q).float() - w).abs()
    assert (err <= w.abs().amax(1, keepdim=True) * (1 / 254 + 1 / 128)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group_size", [32, 64])
def test_int4_kernel_matches_dequantize_then_matmul(dtype, group_size):
    w, x = _weight_and_input(1)
    codes, scale, zero = int4_codes(w, group_size)
    expected = F.linear(_bf16(x), dequantize_int4_codes(codes, scale, zero))
    actual = linear(x.to(dtype), quantize_int4(w, group_size))
    assert actual.shape == (5, OUT) and actual.dtype == dtype
    _close(actual, expected)


def test_int4_keeps_q4_1_weights_exactly():
    """Weights on GGUF's Q4_1 grid (d * q + m per block of 32, codes 0 and 15 present, as
    llama.cpp makes them) come back unchanged: a GGUF checkpoint is served on its own values."""
    gen = torch.Generator().manual_seed(2)
    blocks = OUT * IN // 32
    d = torch.rand(blocks, 1, generator=gen) * 0.01 + 1e-3
    m = -torch.rand(blocks, 1, generator=gen) * 0.1
    q = torch.randint(0, 16, (blocks, 32), generator=gen)
    q[:, 0], q[:, 1] = 0, 15
    w = (d * q + m).reshape(OUT, IN)
    codes, scale, zero = int4_codes(w, 32)
    torch.testing.assert_close(dequantize_int4_codes(codes, scale, zero), w, atol=1e-6, rtol=0)


def test_quantized_weights_take_a_fraction_of_the_bytes():
    w, _ = _weight_and_input(3)
    full = weight_bytes(w)  # fp32: 32 bits a weight
    assert weight_bytes(quantize_int8(w)) < full / 3.9  # 8 bits + a scale a row
    # 4 bits + a bf16 scale and zero per 32 weights = 5 bits
    assert weight_bytes(quantize_int4(w)) <= full * 5 / 32


def test_int4_refuses_a_width_no_group_divides():
    with pytest.raises(ValueError, match="multiple of group"):
        quantize_int4(torch.randn(64, 48), 32)
