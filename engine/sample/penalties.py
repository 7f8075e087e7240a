"""Repetition, presence and frequency penalties (vLLM's semantics), applied where they land.

A penalty changes only the logits of tokens a row has already seen: repetition over the
prompt and the output, presence and frequency over the output. So the work here is sized by
those tokens, not by the vocabulary: the (row, token) pairs are found on the host, with numpy,
and the logits at them are read, changed and written back by flat index.

Counting into ``[rows, vocabulary]`` tensors instead (vLLM's way, cheap on a GPU) cost a CPU
about fifteen passes over the whole batch's logits, and a prompt's token list turned into a
tensor every step: SmolLM2 (a 49,152-token vocabulary) sampling 64 sequences with all three
penalties spent 11.1 ms of each step on them, against 1.1 ms here; with 1,000-token prompts,
16 rows took 8.6 ms against 0.9 (bench/penalties.py). A prompt's distinct tokens are found
once per request (``distinct_prompt_ids``). The output grows by a token or a few each step:
its distinct tokens and their counts are kept on the request and brought up to date with the
tokens appended since (``OutputCounts``). With the logits read and written by
``index_select``/``index_copy_``, 64 rows with 1,000-token prompts and 2,000 output tokens
take 5.4-6.7 ms a step against 14.8-17.8 ms when each output was counted again every step (the
2026-11-27 record in docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from engine.device_copy import to_device

if TYPE_CHECKING:
    from engine.sample.metadata import SamplingBatch
    from engine.sampling_params import SamplingParams


class PenalizedRow(Protocol):
    """A batch row with penalties: a Request, or a speculative draft position of one."""

    sampling_params: SamplingParams
    prompt_token_set: np.ndarray | None
    output_counts: OutputCounts | None  # the request's: its draft rows share it
    # The drafts the row's output ends with: a draft position's earlier drafts, () for a
    # request's own row. They are not the request's yet, so never counted into its counts.
    row_drafts: Sequence[int]

    @property
    def prompt_token_ids(self) -> list[int]: ...

    @property
    def output_token_ids(self) -> list[int]: ...


def distinct_prompt_ids(row: PenalizedRow) -> np.ndarray:
    """The row's distinct prompt token ids, sorted; computed the first time and kept on the
    request (its prompt never changes: a preempted or resumed request keeps it)."""
    if row.prompt_token_set is None:
        row.prompt_token_set = np.unique(np.asarray(row.prompt_token_ids, dtype=np.int64))
    return row.prompt_token_set


class OutputCounts:
    """A request's distinct output tokens, in the order they first appeared, and how often
    each occurs, over its first ``num_counted`` output tokens. ``update`` counts the tokens
    appended since: a dictionary lookup and a store or two per token, 1.3 us a row and step
    where counting a 2,000-token output again (``np.unique``) took 94 us."""

    __slots__ = ("_counts", "_ids", "_position", "num_counted")

    def __init__(self) -> None:
        self._position: dict[int, int] = {}  # token -> its index in _ids and _counts
        self._ids = np.empty(16, dtype=np.int64)
        self._counts = np.empty(16, dtype=np.int64)
        self.num_counted = 0

    def update(self, output: list[int], length: int) -> tuple[np.ndarray, np.ndarray]:
        """(distinct ids, counts) of ``output[:length]``, the request's output so far: views
        that the next update may change."""
        if length < self.num_counted:  # an output never shrinks in the engine; recount
            self.__init__()
        if length > self.num_counted:
            for token in output[self.num_counted : length]:
                self._count(token)
            self.num_counted = length
        size = len(self._position)
        return self._ids[:size], self._counts[:size]

    def with_tokens(self, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(distinct ids, counts) of the counted output followed by ``tokens`` (a draft row's
        drafts), as new arrays: the counts kept do not change."""
        size = len(self._position)
        ids, counts = self._ids[:size], self._counts[:size].copy()
        extra: dict[int, int] = {}
        for token in tokens:
            position = self._position.get(token)
            if position is None:
                extra[token] = extra.get(token, 0) + 1
            else:
                counts[position] += 1
        if extra:
            ids = np.concatenate([ids, np.fromiter(extra, np.int64, len(extra))])
            added = np.fromiter(extra.values(), np.int64, len(extra))
            counts = np.concatenate([counts, added])
        return ids, counts

    def _count(self, token: int) -> None:
        position = self._position.get(token)
        if position is not None:
            self._counts[position] += 1
            return
        position = len(self._position)
        if position == len(self._ids):
            self._ids = np.resize(self._ids, 2 * position)
            self._counts = np.resize(self._counts, 2 * position)
        self._ids[position], self._counts[position] = token, 1
        self._position[token] = position


def output_counts(row: PenalizedRow) -> tuple[np.ndarray, np.ndarray]:
    """(distinct ids, counts) of the row's output: the request's, kept up to date on it, and
    a draft row's drafts counted in on top."""
    output, drafts = row.output_token_ids, row.row_drafts
    if row.output_counts is None:
        row.output_counts = OutputCounts()
    ids, counts = row.output_counts.update(output, len(output) - len(drafts))
    if drafts:
        ids, counts = row.output_counts.with_tokens(drafts)
    return ids, counts


def apply_penalties(logits: torch.Tensor, batch: SamplingBatch) -> None:
    """In place on ``logits`` [rows, vocab]: a repetition penalty divides a positive logit of a
    seen token (prompt or output) and multiplies a negative one; then a frequency penalty
    subtracts once per occurrence in the output and a presence penalty once per token."""
    vocab, device = logits.shape[1], logits.device
    seen, output, counts = penalty_targets(batch.penalized_rows, vocab)
    # One flat index per (row, token): a third faster than indexing by row and column, and
    # index_select / index_copy_ two to three times faster than tensor[keys] on a CPU.
    flat = logits.view(-1) if logits.is_contiguous() else logits.contiguous().view(-1)
    seen_keys = to_device(seen, torch.long, device)
    output_keys = to_device(output, torch.long, device)
    if seen.size:
        values = flat.index_select(0, seen_keys)
        factor = batch.repetition_penalty.index_select(0, seen_keys // vocab)
        flat.index_copy_(0, seen_keys, _repeated(values, factor))
    if output.size:
        values, rows = flat.index_select(0, output_keys), output_keys // vocab
        frequency = batch.frequency_penalty.index_select(0, rows)
        values -= frequency * to_device(counts, logits.dtype, device)
        values -= batch.presence_penalty.index_select(0, rows)
        flat.index_copy_(0, output_keys, values)
    if batch.pending_rows is not None:
        _apply_pending(flat, vocab, batch, seen_keys, output_keys)
    if flat.data_ptr() != logits.data_ptr():
        logits.copy_(flat.view_as(logits))


def _repeated(values: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """A repetition penalty: positive logits divided by it, the others multiplied."""
    return torch.where(values > 0, values / factor, values * factor)


def _apply_pending(
    flat: torch.Tensor,
    vocab: int,
    batch: SamplingBatch,
    seen_keys: torch.Tensor,
    output_keys: torch.Tensor,
) -> None:
    """Each row's token sampled by the step in flight, on the device: one more output token.
    Its logit already carries what the host's tokens gave it; it takes the repetition
    penalty unless the token was seen, the presence penalty unless it was in the output, and
    one more frequency penalty. Membership is found on the device, so nothing is read back."""
    rows = batch.pending_rows
    keys = rows * vocab + batch.pending_tokens
    values = flat.index_select(0, keys)
    repetition = batch.repetition_penalty.index_select(0, rows)
    values = torch.where(torch.isin(keys, seen_keys), values, _repeated(values, repetition))
    values -= batch.frequency_penalty.index_select(0, rows)
    presence = batch.presence_penalty.index_select(0, rows)
    values -= torch.where(torch.isin(keys, output_keys), 0.0, presence)
    flat.index_copy_(0, keys, values)


def penalty_targets(
    rows: list[tuple[int, PenalizedRow]], vocab: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat indexes (row x vocab + token) into the batch's logits: the tokens seen by each
    row with a repetition penalty (a token in both prompt and output twice, which is harmless:
    both writes carry the value computed from the same logit), and the distinct tokens of
    each row's output with their counts (presence, frequency)."""
    seen_keys, output_keys, row_counts = [], [], []
    for row, request in rows:
        base = row * vocab
        ids, counts = output_counts(request)
        if len(ids):
            output_keys.append(ids + base)
            row_counts.append(counts)
        if request.sampling_params.repetition_penalty != 1.0:
            seen_keys.append(distinct_prompt_ids(request) + base)
            if len(ids):
                seen_keys.append(output_keys[-1])
    output = counts = np.empty(0, dtype=np.int64)
    if output_keys:
        output, counts = np.concatenate(output_keys), np.concatenate(row_counts)
    seen = np.concatenate(seen_keys) if seen_keys else np.empty(0, dtype=np.int64)
    return seen, output, counts
