"""One step's flattened batch: each scheduled request's new tokens, positions, KV slots and
block table from the SchedulerOutput (O(batch) Python, the rest in tensor ops), decodes before
prefill chunks as the attention backends expect, and the rows the sampler reads.

A request verifying draft tokens (engine/spec_decode/) runs ``[last token, d1..dk]`` as k + 1
decode rows, not as a prefill chunk: row j is a query at position p + j that sees p + j + 1
tokens, the cache's and the rows before it (every row's K/V is written before any row
attends). Each row is then computed exactly as a one-token decode at that position would be
(the decode attention kernel and the decode-row linear kernels give a row the same bits
whatever rows come with it), so verification cannot change a greedy output, with float or
quantized weights; and a step of decodes and verifications runs the one-call decode step
(engine/models/fused_decode.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from engine.attention import AttentionMetadata
from engine.core.scheduler_output import SchedulerOutput
from engine.device_copy import to_device
from engine.request import Request
from engine.spec_decode.verify import DraftRow, draft_rows

if TYPE_CHECKING:
    from engine.models.decoder import LoraApply


@dataclass(slots=True)
class ModelInputs:
    """One step's flattened batch: decodes first, then prefill chunks, in ``requests`` order."""

    requests: list[Request]
    num_scheduled_tokens: dict[str, int]
    # len(requests) + 1 offsets: request i's rows are request_starts[i]:request_starts[i + 1]
    # (a verifying request has several rows, each an attention sequence of its own).
    request_starts: list[int]
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    attention: AttentionMetadata
    # Set by the runner: None when no request of this step uses an adapter
    lora: LoraApply | None
    # Requests that reach the end of their known tokens and so sample one, and their last row;
    # a request with draft tokens samples every verified row (one DraftRow each).
    sample_requests: list[Request | DraftRow]
    sample_rows: list[int]


class InFlightTokens(Protocol):
    """The tokens of the step still on the device (engine/async_steps.py)."""

    token_ids: torch.Tensor  # [num sampled rows], on the device
    row_of: dict[str, int]  # request id -> its row in token_ids


def build_step_inputs(
    out: SchedulerOutput,
    block_size: int,
    device: torch.device,
    in_flight: InFlightTokens | None = None,
) -> ModelInputs:
    """Flatten the scheduled requests into one varlen batch, decodes (and verifications) first.

    A request whose last token ``in_flight`` has yet to give (``num_pending_tokens``) gets it
    on the device, from that step's sampled tokens: the host never waits for them."""
    counts = out.num_scheduled_tokens
    # One query token, or one known token left followed by drafts: decode rows.
    decodes, prefills = [], []
    for r in out.scheduled_requests:
        num_left = r.num_tokens + r.num_pending_tokens - r.num_computed_tokens
        one = counts[r.request_id] == 1 or num_left == 1
        (decodes if one else prefills).append(r)
    # Similar lengths side by side: the attention backend pads decodes per group.
    decodes.sort(key=lambda r: r.num_computed_tokens)
    bs = block_size
    rows = _Rows()
    # Each sequence's block table: its row of the KV cache manager's array, else its list.
    store = out.block_rows
    row_of = store.row_of if store is not None else None
    gather: list[tuple[int, int]] = []  # (row, row of in_flight.token_ids) for pending tokens
    for r in decodes:
        start, table = r.num_computed_tokens, out.block_tables[r.request_id]
        table_key = table if row_of is None else row_of[r.request_id]
        end = start + counts[r.request_id]
        num_known = r.num_tokens + r.num_pending_tokens
        if end == num_known == start + 1:  # one token, sampled from: the usual row, inlined
            if start < r.num_tokens:
                token = r.all_token_ids[start]
            else:  # sampled by the step in flight: copied on the device below
                gather.append((len(rows.input_ids), in_flight.row_of[r.request_id]))
                token = 0
            rows.add_decode(r, token, start, table[start // bs] * bs + start % bs, table_key)
            continue
        num_drafts = end - num_known  # draft tokens to verify (engine/spec_decode/)
        if start < r.num_tokens:
            tokens = [r.all_token_ids[start]]
        else:  # sampled by the step in flight: copied on the device below
            gather.append((len(rows.input_ids), in_flight.row_of[r.request_id]))
            tokens = [0]
        if num_drafts > 0:
            tokens.extend(r.spec.draft_token_ids[:num_drafts])
        for p, token in enumerate(tokens, start):
            rows.add_sequence([token], [p], [table[p // bs] * bs + p % bs], p + 1, table_key)
        if num_drafts > 0:
            rows.sample(draft_rows(r, num_drafts), len(tokens))
        elif end == num_known:
            rows.sample([r], 1)
    num_decodes = rows.num_seqs
    for r in prefills:
        start, table = r.num_computed_tokens, out.block_tables[r.request_id]
        end = start + counts[r.request_id]
        slots = [table[p // bs] * bs + p % bs for p in range(start, end)]
        table_key = table if row_of is None else row_of[r.request_id]
        rows.add_sequence(r.all_token_ids[start:end], range(start, end), slots, end, table_key)
        if end == r.num_tokens + r.num_pending_tokens:
            rows.sample([r], 1)

    ordered = decodes + prefills
    request_starts = [0]
    for r in ordered:
        request_starts.append(request_starts[-1] + counts[r.request_id])
    tables = _padded(rows.tables) if store is None else store.gather(rows.tables)
    metadata = AttentionMetadata(
        slot_mapping=to_device(rows.slots, torch.long, device),
        seq_lens=to_device(rows.seq_lens, torch.long, device),
        block_tables=to_device(tables, torch.long, device),
        seq_lens_list=rows.seq_lens,
        query_start_loc=rows.query_start_loc,
        num_decodes=num_decodes,
        block_size=bs,
    )
    input_ids = to_device(rows.input_ids, torch.long, device)
    if gather:
        dst, src = zip(*gather, strict=True)
        input_ids[to_device(dst, torch.long, device)] = in_flight.token_ids[
            to_device(src, torch.long, device)
        ]
    return ModelInputs(
        requests=ordered,
        num_scheduled_tokens=counts,
        request_starts=request_starts,
        input_ids=input_ids,
        positions=to_device(rows.positions, torch.long, device),
        attention=metadata,
        lora=None,
        sample_requests=rows.sample_requests,
        sample_rows=rows.sample_rows,
    )


def _padded(tables: list[list[int]]) -> np.ndarray:
    """The block tables as one [rows, width] array, padded with block 0, from one pass over
    their ids (for a SchedulerOutput without ``block_rows``): torch.tensor over padded nested
    lists took 3.2 ms for 256 sequences of up to 120 blocks; this takes 0.5 ms."""
    lengths = np.fromiter(map(len, tables), dtype=np.int64, count=len(tables))
    width = int(lengths.max())
    ids = chain.from_iterable(tables)
    table = np.zeros((len(tables), width), dtype=np.int64)
    table[np.arange(width) < lengths[:, None]] = np.fromiter(ids, np.int64, int(lengths.sum()))
    return table


class _Rows:
    """The flattened batch as it is built: its tokens, and its attention sequences."""

    def __init__(self) -> None:
        self.input_ids: list[int] = []
        self.positions: list[int] = []
        self.slots: list[int] = []
        self.seq_lens: list[int] = []
        self.query_start_loc = [0]
        self.tables: list = []  # per sequence: its block table's row (BlockTableRows) or list
        self.sample_requests: list[Request | DraftRow] = []
        self.sample_rows: list[int] = []

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    def add_sequence(self, token_ids, positions, slots, seq_len: int, table) -> None:
        self.input_ids.extend(token_ids)
        self.positions.extend(positions)
        self.slots.extend(slots)
        self.seq_lens.append(seq_len)
        self.query_start_loc.append(len(self.input_ids))
        self.tables.append(table)

    def add_decode(self, request, token_id: int, position: int, slot: int, table) -> None:
        """``add_sequence`` and ``sample`` of a one-token decode row, in one call."""
        row = len(self.input_ids)
        self.input_ids.append(token_id)
        self.positions.append(position)
        self.slots.append(slot)
        self.seq_lens.append(position + 1)
        self.query_start_loc.append(row + 1)
        self.tables.append(table)
        self.sample_requests.append(request)
        self.sample_rows.append(row)

    def sample(self, requests: list, num_rows: int) -> None:
        """The sampler reads the last ``num_rows`` rows added, one for each of ``requests``."""
        self.sample_requests.extend(requests)
        end = len(self.input_ids)
        self.sample_rows.extend(range(end - num_rows, end))
