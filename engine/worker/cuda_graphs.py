"""CUDA graphs for decode steps: one captured forward per batch size, replayed with padding.

A decode step of a small model is dominated by launch overhead (hundreds of small kernels per
step); replaying a captured graph launches them all at once. Graphs are captured for a list of
batch sizes (1, 2, 4, then every multiple of 8 up to ``max_num_seqs``, as vLLM does); a batch
of ``n`` decodes replays the smallest captured size >= n, its extra rows padded with slot -1
(the KV write skips them) and length 0 (attention reads nothing for them).

The captured forward reads static buffers that each step copies into: token ids, positions,
slots, int32 lengths and block tables. Attention is prepared with a fixed length bound
(``max_model_len``, capped at GRAPH_MAX_SEQ_LEN), so one graph serves every context up to it.
Only the Triton backend can be captured (the PyTorch backend reads lengths on the host to
size its tensors); steps with prefill chunks, with more decodes than the largest graph, or
with a context past the bound run eagerly.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable

import torch

from engine.attention.backend import AttentionBackend, AttentionMetadata

logger = logging.getLogger(__name__)

# Longest context a replayed decode serves. The decode kernel's grid and its float32 partial
# buffers scale with this bound, not with the real lengths (a 128K bound would put ~1 GB of
# partials per step in the graph pool and launch 256 partitions per sequence, nearly all
# empty); longer contexts are rare and run eagerly with their real length.
GRAPH_MAX_SEQ_LEN = 8192


def capture_sizes(max_num_seqs: int) -> list[int]:
    """Batch sizes to capture: 1, 2, 4, then multiples of 8, up to and including max_num_seqs."""
    if max_num_seqs <= 0:
        raise ValueError(f"max_num_seqs must be positive, got {max_num_seqs}")
    sizes = [s for s in (1, 2, 4) if s < max_num_seqs]
    sizes += list(range(8, max_num_seqs, 8))
    return sorted({*sizes, max_num_seqs})


def padded_size(sizes: list[int], num_seqs: int) -> int | None:
    """The smallest captured size that holds ``num_seqs`` rows, or None if none does."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


class DecodeGraphs:
    """Captured decode forwards of ``model`` over ``kv_caches`` for each size in ``sizes``."""

    def __init__(
        self,
        model,
        backend: AttentionBackend,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        *,
        sizes: list[int],
        max_model_len: int,
        block_size: int,
        device: torch.device,
    ) -> None:
        if backend.name != "triton":
            raise ValueError(f"CUDA graphs need the triton attention backend, got {backend.name!r}")
        self.model = model
        self.backend = backend
        self.sizes = sorted(sizes)
        self.max_seq_len = min(max_model_len, GRAPH_MAX_SEQ_LEN)
        self.block_size = block_size
        largest = self.sizes[-1]
        self.max_blocks = -(-self.max_seq_len // block_size)
        self.input_ids = torch.zeros(largest, dtype=torch.long, device=device)
        self.positions = torch.zeros(largest, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((largest,), -1, dtype=torch.long, device=device)
        self.seq_lens = torch.zeros(largest, dtype=torch.int32, device=device)
        self.block_tables = torch.zeros(largest, self.max_blocks, dtype=torch.int32, device=device)
        self.replays: dict[int, Callable[[], torch.Tensor]] = {}
        self.num_replays = 0
        self._pool = None
        self._graphs: list[torch.cuda.CUDAGraph] = []
        with torch.inference_mode():
            # Largest first: the smaller graphs then fit in the memory pool it leaves behind.
            for size in reversed(self.sizes):
                self.replays[size] = self._capture(self._forward_of(size, kv_caches))
        logger.info("captured decode CUDA graphs for batch sizes %s", self.sizes)

    def _forward_of(self, size: int, kv_caches) -> Callable[[], torch.Tensor]:
        """The model forward over the first ``size`` rows of the static buffers."""
        metadata = AttentionMetadata(
            slot_mapping=self.slot_mapping[:size],
            seq_lens=self.seq_lens[:size],
            block_tables=self.block_tables[:size],
            # Host-side bound on every length: sizes the decode kernel's grid for any context.
            seq_lens_list=[self.max_seq_len] * size,
            query_start_loc=list(range(size + 1)),
            num_decodes=size,
            block_size=self.block_size,
        )
        self.backend.prepare(metadata)
        input_ids, positions = self.input_ids[:size], self.positions[:size]
        return lambda: self.model.forward(input_ids, positions, kv_caches, metadata)

    def _capture(self, forward: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """Capture ``forward`` in a CUDA graph; returns a replay that gives its output buffer."""
        # The eager run compiles the Triton kernels and sets up cuBLAS outside the capture;
        # its rows hold slot -1 and length 0, so it writes and reads no cache entry.
        forward()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            hidden = forward()
        self._pool = graph.pool()
        self._graphs.append(graph)

        def replay() -> torch.Tensor:
            graph.replay()
            return hidden

        return replay

    def can_run(self, metadata: AttentionMetadata) -> bool:
        """True for a decode-only step that fits a captured size and the length bound."""
        return (
            metadata.num_decodes == metadata.num_seqs
            and 0 < metadata.num_seqs <= self.sizes[-1]
            and max(metadata.seq_lens_list) <= self.max_seq_len
            and metadata.block_tables.shape[1] <= self.max_blocks
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        """Hidden states [num_seqs, hidden] of a decode step, by replaying a captured graph.

        The result is a view of the graph's output buffer: use it before the next replay.
        """
        n = metadata.num_seqs
        size = padded_size(self.sizes, n)
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(metadata.slot_mapping)
        self.slot_mapping[n:size].fill_(-1)
        self.seq_lens[:n].copy_(metadata.seq_lens)
        self.seq_lens[n:size].zero_()
        # Columns past this step's width may hold stale block ids: the kernel reads a table
        # entry only for positions below the row's length, so they are never used.
        self.block_tables[:n, : metadata.block_tables.shape[1]].copy_(metadata.block_tables)
        if not self.num_replays:  # the log's proof that graphs serve (once per engine)
            logger.info("first decode step replayed from a CUDA graph (%d of %d rows)", n, size)
        self.num_replays += 1
        return self.replays[size]()[:n]


def maybe_capture_decode_graphs(
    model,
    backend: AttentionBackend,
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
    *,
    max_num_seqs: int,
    max_model_len: int,
    block_size: int,
    device: torch.device,
) -> DecodeGraphs | None:
    """Decode graphs on CUDA with the Triton backend; None (eager) everywhere else."""
    if device.type != "cuda" or backend.name != "triton":
        return None
    return DecodeGraphs(
        model,
        backend,
        kv_caches,
        sizes=capture_sizes(max_num_seqs),
        max_model_len=max_model_len,
        block_size=block_size,
        device=device,
    )
