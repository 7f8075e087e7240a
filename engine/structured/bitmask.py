"""The step's grammar mask: fill one bit per token for each constrained row, then add -inf to
every token a grammar refuses, in one vectorized pass over those rows only.

Rows without a grammar are never read or written, and a step without any constrained row
costs one scan of the request list. llguidance fills the packed mask (vocab/32 int32 words a
row) on the CPU straight into a reusable buffer (pinned on CUDA), copied to the logits' device
once per step. It is unpacked by a table lookup, byte -> 8 additive biases (0 or -inf), and
added with one ``index_add_``: on CPU this is about ten times faster than unpacking bits with
shifts and calling ``masked_fill`` (measured in bench/structured_throughput.py's development).
Large batches on many-core machines fill their masks on llguidance's own thread pool.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import llguidance
import torch

if TYPE_CHECKING:
    from engine.request import Request


# From this many constrained rows, llguidance fills the masks on its own thread pool; on few
# cores (or a few rows) the pool's hand-off costs more than it saves.
PARALLEL_FILL_ROWS = 32 if (os.cpu_count() or 1) >= 8 else 1 << 30


class GrammarBitmask:
    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.parallel_fill_rows = PARALLEL_FILL_ROWS
        self._executor: llguidance.LLExecutor | None = None
        self.vocab_size = vocab_size
        self.device = device
        self.num_words = (vocab_size + 31) // 32
        self._buffer: torch.Tensor | None = None  # [rows, num_words] int32, grown on demand
        # [256, 8]: bias of token 8*k + j when byte k of the row's mask is b: 0 if bit j of b
        # is set (allowed), -inf if not. Bytes are little-endian, as llguidance writes words.
        bits = (torch.arange(256)[:, None] >> torch.arange(8)) & 1
        self._bias_of_byte = torch.zeros(256, 8).masked_fill_(bits == 0, float("-inf"))
        self._bias_of_byte = self._bias_of_byte.to(device)

    def apply(self, logits: torch.Tensor, requests: list[Request]) -> None:
        """``logits``: [len(requests), vocab] float, row i sampled for requests[i]; modified
        in place so that each constrained row can only pick a token its grammar allows."""
        rows = [i for i, r in enumerate(requests) if r.grammar is not None]
        if not rows:
            return
        num_rows = len(rows)
        packed = self._fill(requests, rows)  # [num_rows, num_words] int32
        if packed.device != logits.device:
            packed = packed.to(logits.device, non_blocking=True)
        byte_index = packed.view(torch.uint8).view(-1).long()  # [num_rows * num_words * 4]
        bias = self._bias_of_byte.index_select(0, byte_index).view(num_rows, -1)
        bias = bias[:, : logits.shape[1]].to(logits.dtype)  # [num_rows, vocab]
        if num_rows == logits.shape[0]:
            logits.add_(bias)
        else:
            logits.index_add_(0, torch.tensor(rows, device=logits.device), bias)

    def _fill(self, requests: list[Request], rows: list[int]) -> torch.Tensor:
        buffer = self._buffer
        if buffer is None or buffer.shape[0] < len(rows):
            size = max(len(rows), 2 * buffer.shape[0] if buffer is not None else 8)
            buffer = torch.empty(
                (size, self.num_words),
                dtype=torch.int32,
                pin_memory=self.device.type == "cuda",
            )
            self._buffer = buffer
        row_bytes = self.num_words * 4
        base = buffer.data_ptr()
        if len(rows) >= self.parallel_fill_rows:
            if self._executor is None:
                self._executor = llguidance.LLExecutor()
            matchers = [(requests[i].grammar.matcher, k) for k, i in enumerate(rows)]
            self._executor.unsafe_compute_mask_ptr(matchers, base, row_bytes, buffer.shape[0])
        else:
            for k, i in enumerate(rows):
                requests[i].grammar.fill_mask(base + k * row_bytes, row_bytes)
        return buffer[: len(rows)]
