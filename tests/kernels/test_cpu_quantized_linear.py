"""The native CPU quantized matmul kernels (kernels/cpu) against their PyTorch references."""

from __future__ import annotations

import pytest
import torch

from kernels.cpu import reference as ref

# (rows, in_features, out_features): one row (decode), groups of four rows and leftovers, widths
# that are and are not multiples of the vector loops (int8 only: int4 needs blocks of 32). The
# int4 widths cover the VNNI loop's groups of four blocks, its pair and its single block
# (7 blocks: 4 + 2 + 1; 5: 4 + 1; 3: 2 + 1).
INT8_SHAPES = [(1, 576, 960), (4, 576, 33), (7, 1536, 64), (9, 40, 17), (2, 5, 3), (1, 8, 1)]
INT4_SHAPES = [
    (1, 576, 960),
    (4, 576, 33),
    (7, 1536, 64),
    (9, 32, 17),
    (3, 96, 5),
    (1, 224, 9),
    (5, 160, 3),
]
# Interleaved by eight rows (the AVX2 build's layout): out_features a multiple of 8.
INT4_GROUP_SHAPES = [(1, 576, 960), (4, 576, 32), (7, 1536, 64), (9, 32, 16), (3, 96, 8)]


def _bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float32 rounding room for x @ w.T summed in another order: eps times |x| @ |w|.T."""
    return 1e-5 * (x.abs() @ w.abs().t()) + 1e-6


def _int4_weight(out_features: int, in_features: int, gen: torch.Generator):
    codes = torch.randint(0, 16, (out_features, in_features), generator=gen)
    blocks = (out_features, in_features // ref.INT4_BLOCK)
    scales = (torch.rand(blocks, generator=gen) * 0.02 + 1e-3).half()
    mins = (-torch.rand(blocks, generator=gen) * 0.1).half()
    return ref.pack_int4(codes), scales, mins


@pytest.mark.parametrize(("rows", "k", "n"), INT8_SHAPES)
def test_int8_kernel_matches_the_reference(ops, rows, k, n):
    gen = torch.Generator().manual_seed(rows * 1000 + k + n)
    q = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    scales = torch.rand(n, generator=gen) * 0.01
    x = torch.randn(rows, k, generator=gen)
    actual = ops.int8_linear(x, q, scales)
    expected = ref.int8_linear(x, q, scales)
    assert actual.shape == (rows, n) and actual.dtype == torch.float32
    w = q.float() * scales[:, None]
    assert ((actual - expected).abs() <= _bound(x, w)).all()


@pytest.mark.parametrize(
    ("rows", "k", "n", "interleave"),
    [(*shape, 1) for shape in INT4_SHAPES] + [(*shape, 8) for shape in INT4_GROUP_SHAPES],
)
def test_int4_kernel_matches_the_reference(ops, rows, k, n, interleave):
    gen = torch.Generator().manual_seed(rows * 1000 + k + n)
    packed, scales, mins = _int4_weight(n, k, gen)  # rows in order
    w = ref.int4_dequantize(packed, scales, mins)
    stored = (packed, scales, mins)
    if interleave == 8:
        stored = ref.interleave_int4_rows(*stored)
    x = torch.randn(rows, k, generator=gen)
    actual = ops.int4_linear(x, *stored, interleave)
    expected = ref.int4_linear(x, *stored, interleave)
    assert actual.shape == (rows, n) and actual.dtype == torch.float32
    block_mins = mins.float().repeat_interleave(ref.INT4_BLOCK, dim=1)
    assert ((actual - expected).abs() <= 2 * _bound(x, w.abs() + block_mins.abs())).all()
    # 8-bit activations: off the exact product by at most half a step of each block's codes
    x_error = (ref.quantize_activations(x) - x).abs()
    block_amax = x.abs().reshape(rows, -1, 32).amax(-1, keepdim=True).expand(-1, -1, 32)
    assert (x_error <= block_amax.reshape(rows, k) / 254 * 1.001).all()
    exact = x @ w.t()
    assert (
        (actual - exact).abs()
        <= x_error @ (w - block_mins).abs().t() + 2 * _bound(x, w.abs() + block_mins.abs())
    ).all()
    # dequantizing (the path of large batches) gives the reference's matrix
    torch.testing.assert_close(ops.int4_dequantize(*stored, interleave), w, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ref.int4_dequantize(*stored, interleave), w, rtol=1e-6, atol=1e-7)


def test_interleaving_int4_rows_reorders_the_bytes_and_back():
    gen = torch.Generator().manual_seed(3)
    plain = _int4_weight(16, 64, gen)
    grouped = ref.interleave_int4_rows(*plain)
    assert [t.shape for t in grouped] == [t.shape for t in plain]
    # block 1 of row 9 (group 1, lane 1): its code bytes 4..7 are chunk 1's lane 1
    group_start = 1 * 8 * 64 // 2
    chunk = grouped[0].flatten()[group_start + 1 * 128 + 1 * 32 + 1 * 4 :][:4]
    assert torch.equal(chunk, plain[0][9, 16 + 4 : 16 + 8])
    assert grouped[1].flatten()[1 * 8 * 2 + 1 * 8 + 1] == plain[1][9, 1]
    assert all(
        torch.equal(a, b) for a, b in zip(ref.deinterleave_int4_rows(*grouped), plain, strict=True)
    )
    with pytest.raises(ValueError, match="groups of 8"):
        ref.interleave_int4_rows(*_int4_weight(12, 64, gen))


def test_a_strided_input_is_read_correctly(ops):
    gen = torch.Generator().manual_seed(5)
    q = torch.randint(-127, 128, (24, 64), generator=gen, dtype=torch.int8)
    scales = torch.rand(24, generator=gen)
    x = torch.randn(64, 3, generator=gen).t()  # [3, 64], not contiguous
    diff = ops.int8_linear(x, q, scales) - ref.int8_linear(x, q, scales)
    assert (diff.abs() <= _bound(x, q.float() * scales[:, None])).all()


def test_pack_and_unpack_are_inverse_and_follow_q4_1_order():
    codes = torch.arange(32).remainder(16)[None, :].repeat(2, 1)  # 0..15, 0..15
    packed = ref.pack_int4(codes)
    # byte j holds weight j (low nibble) and weight j + 16 (high nibble)
    assert packed.shape == (2, 16) and packed[0, 3].item() == 3 | (3 << 4)
    assert torch.equal(ref.unpack_int4(packed), codes.to(torch.uint8))


def test_bad_inputs_are_refused_with_the_reason(ops):
    q = torch.zeros(4, 32, dtype=torch.int8)
    scales = torch.ones(4)
    with pytest.raises(RuntimeError, match="float32"):
        ops.int8_linear(torch.zeros(1, 32, dtype=torch.float64), q, scales)
    with pytest.raises(RuntimeError, match="columns"):
        ops.int8_linear(torch.zeros(1, 16), q, scales)
    packed = torch.zeros(4, 16, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="float16"):
        ops.int4_linear(torch.zeros(1, 32), packed, scales[:, None], scales[:, None])
    halves = torch.ones(4, 1, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="interleaved by 1 or by 8"):
        ops.int4_linear(torch.zeros(1, 32), packed, halves, halves, 8)  # 4 rows: no group
