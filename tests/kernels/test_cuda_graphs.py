"""Kernels launch without host syncs, so the engine can capture decode steps in CUDA graphs."""

from __future__ import annotations

import pytest
import torch

import kernels.reference as ref
from tests.kernels.paged import make_paged_batch
from tests.support.kernel_cases import tolerance


def _capture(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up compiles the kernels outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.gpu
def test_decode_graph_replays_with_new_lengths_and_queries(triton_ops):
    dtype, max_seq_len = torch.bfloat16, 256
    batch = make_paged_batch(
        [max_seq_len] * 4, num_kv_heads=2, head_dim=64, block_size=16, dtype=dtype, device="cuda"
    )
    query = torch.randn(4, 8, 64, device="cuda").to(dtype)
    seq_lens = batch.seq_lens.clone()
    args = (query, batch.key_cache, batch.value_cache, batch.block_tables, seq_lens, 0.125)
    graph, out = _capture(lambda: triton_ops.paged_decode_attention(*args, max_seq_len, 64))
    for lens in ([1, 17, 64, 256], [255, 3, 128, 65]):
        seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        query.copy_(torch.randn(4, 8, 64).to(dtype))
        graph.replay()
        expected = ref.paged_decode_attention(*args, max_seq_len, 64)
        torch.testing.assert_close(out, expected, **tolerance(dtype))


@pytest.mark.gpu
def test_lora_graph_replays_with_new_adapter_assignment(triton_ops):
    dtype, num_tokens, num_slots = torch.bfloat16, 32, 3
    indices = torch.zeros(num_tokens, dtype=torch.int32, device="cuda")
    x = torch.randn(num_tokens, 64, device="cuda").to(dtype)
    lora_a = (torch.randn(num_slots, 16, 64, device="cuda") / 8).to(dtype)
    lora_b = (torch.randn(num_slots, 48, 16, device="cuda") / 4).to(dtype)
    base = torch.randn(num_tokens, 48, device="cuda").to(dtype)

    def step():
        segments = ref.lora_segments(indices, num_slots)
        y = triton_ops.lora_shrink(x, lora_a, segments)
        return triton_ops.lora_expand(y, lora_b, segments, base.clone())

    graph, out = _capture(step)
    indices.copy_(torch.randint(-1, num_slots, (num_tokens,), dtype=torch.int32))
    graph.replay()
    segments = ref.lora_segments(indices, num_slots)
    expected = ref.lora_expand(ref.lora_shrink(x, lora_a, segments), lora_b, segments, base.clone())
    torch.testing.assert_close(out, expected, **tolerance(dtype))
