"""Decode rows computed together equal each row computed alone, bit for bit: the property that
makes a speculative verification step (1 + k decode rows of one sequence) give exactly the
tokens one-row decoding gives (engine/worker/step_inputs.py). Checked per kernel (the
float32, int8 and int4 linear kernels, paged decode attention) and for a whole decode step of
the tiny models, at one and two threads."""

from __future__ import annotations

import pytest
import torch

from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.layers.quantized_linear import KERNEL_MAX_ROWS, quantize_int4, quantize_int8
from engine.model_config import ModelConfig
from engine.models import load_model
from kernels.cpu import reference as ref

BLOCK = 16


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _linears(ops, n: int, k: int):
    """name -> (x [M, k] -> y [M, n]) for each decode-row linear kernel, on one weight."""
    gen = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=gen) * 0.05
    q8, q4 = quantize_int8(w), quantize_int4(w)
    linears = {
        "float32": lambda x: ops.float_linear(x, w),
        "int8": lambda x: ops.int8_linear(x, q8.qweight, q8.scales),
        "int4": lambda x: ops.int4_linear(x, q4.packed, q4.scales, q4.mins),
    }
    if n % 8 == 0:  # the AVX2 build's layout, groups of eight rows
        q4x8 = ref.interleave_int4_rows(q4.packed, q4.scales, q4.mins)
        linears["int4 interleaved"] = lambda x: ops.int4_linear(x, *q4x8, 8)
    return linears


@pytest.mark.parametrize(("n", "k"), [(960, 576), (37, 1536), (5, 96)])
def test_linear_kernels_give_each_row_what_it_gets_alone(ops, threads, n, k):
    x = torch.randn(KERNEL_MAX_ROWS, k, generator=torch.Generator().manual_seed(k))
    for name, linear in _linears(ops, n, k).items():
        alone = torch.cat([linear(x[i : i + 1]) for i in range(KERNEL_MAX_ROWS)])
        for rows in range(2, KERNEL_MAX_ROWS + 1):
            assert torch.equal(linear(x[:rows]), alone[:rows]), (name, rows)


def test_float_kernel_matches_its_reference(ops):
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(7, 600, generator=gen), torch.randn(130, 600, generator=gen)
    bound = 1e-5 * (x.abs() @ w.abs().t()) + 1e-6  # float32 sums taken in another order
    assert ((ops.float_linear(x, w) - ref.float_linear(x, w)).abs() <= bound).all()


@pytest.mark.parametrize("context", [1, 63, 64, 200, 700])
def test_decode_attention_rows_of_one_sequence_equal_each_alone(ops, threads, context):
    """Verification rows: one block table, queries at positions context .. context + 7, each
    seeing the tokens up to itself; long contexts are split into parts."""
    gen = torch.Generator().manual_seed(context)
    rows, heads, kv_heads, head_dim = 8, 9, 3, 64
    num_blocks = -(-(context + rows) // BLOCK) + 2
    k_cache = torch.randn(num_blocks, BLOCK, kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_blocks, BLOCK, kv_heads, head_dim, generator=gen)
    table = torch.randperm(num_blocks, generator=gen)[None]
    tables = table.repeat(rows, 1)
    lens = torch.arange(context + 1, context + rows + 1)
    query = torch.randn(rows, heads, head_dim, generator=gen)
    together = ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, 0.125)
    for i in range(rows):
        alone = ops.paged_decode_attention(
            query[i : i + 1], k_cache, v_cache, tables[i : i + 1], lens[i : i + 1], 0.125
        )
        assert torch.equal(together[i : i + 1], alone), i


def _mixed_batch(head_dim: int, dtype: torch.dtype, seed: int):
    """Decode rows of four sequences in one call: a one-row decode, 11 verification rows at
    context 130, a one-row decode at 70 and 3 verification rows at 63 (each verification's
    rows share a block table; the kernel runs up to 8 of those together over each chunk of
    tokens)."""
    gen = torch.Generator().manual_seed(seed)
    heads, kv_heads = 9, 3
    sequences = [(4, 1), (130, 11), (69, 1), (63, 3)]  # (context, rows)
    blocks = [-(-(context + rows) // BLOCK) for context, rows in sequences]
    num_blocks = sum(blocks) + 2
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables, lens = [], []
    for (context, rows), n in zip(sequences, blocks, strict=True):
        table, order = order[:n] + [0] * (max(blocks) - n), order[n:]
        tables += [table] * rows
        lens += range(context + 1, context + rows + 1)
    shape = (num_blocks, BLOCK, kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    query = torch.randn(len(lens), heads, head_dim, generator=gen).to(dtype)
    return query, k_cache, v_cache, torch.tensor(tables), torch.tensor(lens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("head_dim", [64, 40])
def test_decode_attention_rows_of_a_mixed_batch_equal_each_alone(ops, threads, dtype, head_dim):
    """Verification rows beside other sequences, of other lengths; a head_dim that does not fill
    whole registers; a bfloat16 cache."""
    query, k_cache, v_cache, tables, lens = _mixed_batch(head_dim, dtype, head_dim)
    together = ops.paged_decode_attention(query, k_cache, v_cache, tables, lens, 0.125)
    for i in range(len(lens)):
        alone = ops.paged_decode_attention(
            query[i : i + 1], k_cache, v_cache, tables[i : i + 1], lens[i : i + 1], 0.125
        )
        assert torch.equal(together[i : i + 1], alone), i
    # The rows of one verification, taken in any slice, give the same bits again.
    middle = ops.paged_decode_attention(query[2:5], k_cache, v_cache, tables[2:5], lens[2:5], 0.125)
    assert torch.equal(middle, together[2:5])


def _step(token_ids: list[int], start: int, num_blocks: int) -> tuple:
    """A decode step whose rows are positions start, start + 1, ... of one sequence."""
    rows = len(token_ids)
    positions = torch.arange(start, start + rows)
    tables = torch.arange(num_blocks)[None].repeat(rows, 1)  # the sequence's blocks, in order
    metadata = AttentionMetadata(
        slot_mapping=positions.clone(),
        seq_lens=positions + 1,
        block_tables=tables,
        seq_lens_list=(positions + 1).tolist(),
        query_start_loc=list(range(rows + 1)),
        num_decodes=rows,
        block_size=BLOCK,
    )
    return torch.tensor(token_ids), positions, metadata


@pytest.mark.parametrize("fused", [True, False], ids=["fused-step", "layer-loop"])
@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
def test_a_verification_step_equals_one_row_decodes(checkpoints, threads, quantization, fused):
    """1 + k decode rows of one sequence in one forward, against k + 1 one-token decodes:
    the same hidden states (so the same logits) and the same KV cache, bit for bit."""
    config = ModelConfig.from_pretrained(checkpoints.get("llama"))
    model = load_model(
        config,
        dtype=torch.float32,
        device=torch.device("cpu"),
        backend=TorchAttentionBackend(),
        quantization=quantization,
    )
    if not fused:
        model.fused_decode = None
    gen = torch.Generator().manual_seed(7)
    context, rows, num_blocks = 90, 6, 8
    shape = (num_blocks, BLOCK, config.num_key_value_heads, config.head_dim)
    caches = [tuple(torch.randn(shape, generator=gen) for _ in "kv") for _ in model.layers]
    token_ids = torch.randint(0, config.vocab_size, (rows,), generator=gen).tolist()

    def forward(ids: list[int], start: int, kv: list) -> torch.Tensor:
        input_ids, positions, metadata = _step(ids, start, num_blocks)
        model.backend.prepare(metadata)
        with torch.inference_mode():
            return model.forward(input_ids, positions, kv, metadata)

    together_kv = [(k.clone(), v.clone()) for k, v in caches]
    together = forward(token_ids, context, together_kv)
    alone_kv = [(k.clone(), v.clone()) for k, v in caches]
    alone = torch.cat([forward([t], context + i, alone_kv) for i, t in enumerate(token_ids)])
    assert torch.equal(together, alone)
    for (tk, tv), (ak, av) in zip(together_kv, alone_kv, strict=True):
        assert torch.equal(tk, ak) and torch.equal(tv, av)
    with torch.inference_mode():
        logits = model.compute_logits(together)
        for i in range(rows):
            assert torch.equal(logits[i : i + 1], model.compute_logits(alone[i : i + 1])), i
