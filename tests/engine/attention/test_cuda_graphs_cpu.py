"""CUDA-graph bookkeeping that needs no GPU: sizes, padding, which steps may replay.

The replay itself is checked on CPU by test_triton_backend_interpreted.py (eagerly, through
the same static buffers) and on a GPU by test_gpu_engine.py.
"""

from __future__ import annotations

import pytest
import torch

from engine.attention import AttentionMetadata
from engine.worker.cuda_graphs import (
    GRAPH_MAX_SEQ_LEN,
    DecodeGraphs,
    capture_sizes,
    maybe_capture_decode_graphs,
    padded_size,
)


def test_capture_sizes_follow_vllm_and_end_at_max_num_seqs():
    assert capture_sizes(1) == [1]
    assert capture_sizes(3) == [1, 2, 3]
    assert capture_sizes(8) == [1, 2, 4, 8]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    sizes = capture_sizes(256)
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 256 and len(sizes) == 35
    with pytest.raises(ValueError, match="max_num_seqs"):
        capture_sizes(0)


def test_a_batch_replays_the_smallest_graph_that_holds_it():
    sizes = capture_sizes(20)
    assert [padded_size(sizes, n) for n in (1, 2, 3, 5, 8, 9, 17, 20)] == [
        1, 2, 4, 8, 8, 16, 20, 20,
    ]  # fmt: skip
    assert padded_size(sizes, 21) is None


def test_no_graphs_on_cpu():
    class Backend:
        name = "triton"

    graphs = maybe_capture_decode_graphs(
        model=None,
        backend=Backend(),
        kv_caches=[],
        max_num_seqs=8,
        max_model_len=64,
        block_size=16,
        device=torch.device("cpu"),
    )
    assert graphs is None


class _Backend:
    name = "triton"

    def prepare(self, metadata):
        pass


class _UncapturedGraphs(DecodeGraphs):
    def _capture(self, forward):
        return forward  # never called here: these tests only ask can_run


def _metadata(seq_lens: list[int], num_decodes: int, block_size: int = 16) -> AttentionMetadata:
    width = max(-(-n // block_size) for n in seq_lens)
    return AttentionMetadata(
        slot_mapping=torch.zeros(len(seq_lens), dtype=torch.long),
        seq_lens=torch.tensor(seq_lens),
        block_tables=torch.zeros(len(seq_lens), width, dtype=torch.long),
        seq_lens_list=seq_lens,
        query_start_loc=list(range(len(seq_lens) + 1)),
        num_decodes=num_decodes,
        block_size=block_size,
    )


def _graphs(max_model_len: int) -> DecodeGraphs:
    return _UncapturedGraphs(
        None,
        _Backend(),
        [],
        sizes=[1, 2, 4, 8],
        max_model_len=max_model_len,
        block_size=16,
        device=torch.device("cpu"),
    )


def test_only_decode_steps_within_the_bounds_replay():
    graphs = _graphs(max_model_len=1000)
    assert graphs.can_run(_metadata([5, 700, 1000], num_decodes=3))
    assert not graphs.can_run(_metadata([5, 700, 1000], num_decodes=2))  # a prefill chunk
    assert not graphs.can_run(_metadata([5] * 9, num_decodes=9))  # more than the largest graph


def test_long_contexts_past_the_graph_bound_run_eagerly():
    graphs = _graphs(max_model_len=4 * GRAPH_MAX_SEQ_LEN)
    assert graphs.max_seq_len == GRAPH_MAX_SEQ_LEN
    assert graphs.can_run(_metadata([GRAPH_MAX_SEQ_LEN], num_decodes=1))
    assert not graphs.can_run(_metadata([GRAPH_MAX_SEQ_LEN + 1], num_decodes=1))


def test_graphs_need_the_triton_backend():
    class TorchBackend:
        name = "torch"

    with pytest.raises(ValueError, match="triton attention backend"):
        _UncapturedGraphs(
            None, TorchBackend(), [], sizes=[1], max_model_len=64, block_size=16,
            device=torch.device("cpu"),
        )  # fmt: skip
