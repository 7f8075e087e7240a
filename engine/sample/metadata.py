"""SamplingBatch: the sampling parameters of one step's rows, as tensors, built once per step.

Built from plain values so the sampler can be tested with hand-made logits and no model.
Flags (``all_greedy``, ``needs_top_k`` ...) let the sampler skip whole stages; a step of
greedy requests without penalties or logprobs costs one argmax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engine.device_copy import to_device

if TYPE_CHECKING:
    from engine.request import Request
    from engine.sample.penalties import PenalizedRow
    from engine.sampling_params import SamplingParams
    from engine.worker.step_inputs import InFlightTokens


@dataclass(slots=True)
class SamplingBatch:
    temperature: torch.Tensor  # [B] float; 1.0 on greedy rows
    greedy: torch.Tensor  # [B] bool
    all_greedy: bool
    any_greedy: bool
    top_k: torch.Tensor | None  # [B] long, vocab size where disabled; None if no row uses it
    top_p: torch.Tensor | None  # [B] float; None if no row uses it
    min_p: torch.Tensor | None  # [B] float; None if no row uses it
    generators: list[torch.Generator | None]  # per-row seeded generator, or None
    # Penalties: None when no row has any.
    presence_penalty: torch.Tensor | None = None  # [B]
    frequency_penalty: torch.Tensor | None = None  # [B]
    repetition_penalty: torch.Tensor | None = None  # [B]
    # (row, request) for each row with a penalty: engine/sample/penalties.py reads their tokens.
    penalized_rows: list[tuple[int, PenalizedRow]] = field(default_factory=list)
    # Async steps (engine/async_steps.py): the rows with a penalty whose last output token the
    # step in flight has sampled, and those tokens, still on the device ([P] long each).
    pending_rows: torch.Tensor | None = None
    pending_tokens: torch.Tensor | None = None
    # (row, token ids) that must not be sampled yet (stop tokens before min_tokens)
    banned_tokens: list[tuple[int, list[int]]] = field(default_factory=list)
    # OpenAI's logit_bias of the rows that have one, flat: (rows [N], token ids [N], biases
    # [N]); None when no row has one.
    logit_bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    # vLLM's allowed_token_ids: (the rows that restrict [R], then flat (rows [N], token ids
    # [N])); every other token of those rows is masked. None when no row restricts.
    allowed_tokens: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    num_logprobs: list[int | None] = field(default_factory=list)  # per row, None: no logprobs
    # Whether some row's masks (a grammar, allowed tokens, stop tokens held back by
    # min_tokens) could leave it no token at all: the sampler then says which rows they did.
    may_mask_all: bool = False

    def add_pending_tokens(self, in_flight: InFlightTokens) -> None:
        """Take, for each row with a penalty whose request waits for a token of the step in
        flight, that token from the step's sampled tokens on the device (row
        ``in_flight.row_of[request id]``): the host never waits for it."""
        pairs = [
            (row, in_flight.row_of[request.request_id])
            for row, request in self.penalized_rows
            if request.num_pending_tokens
        ]
        if not pairs:  # the step in flight may have sampled nothing (a prompt chunk)
            return
        rows, sources = zip(*pairs, strict=True)
        token_ids = in_flight.token_ids
        device = token_ids.device
        self.pending_rows = to_device(rows, torch.long, device)
        self.pending_tokens = token_ids.index_select(0, to_device(sources, torch.long, device))

    @property
    def max_num_logprobs(self) -> int | None:
        wanted = [k for k in self.num_logprobs if k is not None]
        return max(wanted) if wanted else None

    @classmethod
    def from_requests(
        cls,
        requests: list[Request],
        *,
        generators: dict[str, torch.Generator],
        eos_token_ids: frozenset[int],
        vocab_size: int,
        device: torch.device,
    ) -> SamplingBatch:
        params = [r.sampling_params for r in requests]
        greedy_list = [p.is_greedy for p in params]
        all_greedy = all(greedy_list)
        banned = []
        for row, (r, p) in enumerate(zip(requests, params, strict=True)):
            # The token of a step still in flight (async_steps.py) is an output token too.
            if r.num_output_tokens + r.num_pending_tokens < p.min_tokens:
                stops = set(p.stop_token_ids or ())
                if not p.ignore_eos:
                    stops |= eos_token_ids
                # A stop token id past the logits (the offline LLM does not check them) can
                # never be sampled anyway.
                stops = sorted(t for t in stops if t < vocab_size)
                if stops:
                    banned.append((row, stops))
        batch = cls(
            temperature=to_device(
                [1.0 if g else p.temperature for g, p in zip(greedy_list, params, strict=True)],
                torch.float32,
                device,
            ),
            greedy=to_device(greedy_list, torch.bool, device),
            all_greedy=all_greedy,
            any_greedy=any(greedy_list),
            top_k=None,
            top_p=None,
            min_p=None,
            generators=[generators.get(r.request_id) for r in requests],
            banned_tokens=banned,
            num_logprobs=[p.logprobs for p in params],
        )
        if not all_greedy:
            if any(p.top_k > 0 for p in params):
                batch.top_k = to_device(
                    [p.top_k if 0 < p.top_k < vocab_size else vocab_size for p in params],
                    torch.long,
                    device,
                )
            if any(p.top_p < 1.0 for p in params):
                batch.top_p = to_device([p.top_p for p in params], torch.float32, device)
            if any(p.min_p > 0.0 for p in params):
                batch.min_p = to_device([p.min_p for p in params], torch.float32, device)
        batch.logit_bias = _logit_bias(params, device)
        batch.allowed_tokens = _allowed_tokens(params, device)
        batch.may_mask_all = (
            bool(banned)
            or batch.allowed_tokens is not None
            or any(r.grammar is not None for r in requests)
        )
        if any(p.has_penalties for p in params):
            batch.presence_penalty = to_device(
                [p.presence_penalty for p in params], torch.float32, device
            )
            batch.frequency_penalty = to_device(
                [p.frequency_penalty for p in params], torch.float32, device
            )
            batch.repetition_penalty = to_device(
                [p.repetition_penalty for p in params], torch.float32, device
            )
            batch.penalized_rows = [
                (row, r)
                for row, (r, p) in enumerate(zip(requests, params, strict=True))
                if p.has_penalties
            ]
        return batch


def _logit_bias(params: list[SamplingParams], device: torch.device):
    pairs = [(row, p.logit_bias) for row, p in enumerate(params) if p.logit_bias]
    if not pairs:
        return None
    rows = [row for row, bias in pairs for _ in bias]
    token_ids = [token for _, bias in pairs for token in bias]
    biases = [value for _, bias in pairs for value in bias.values()]
    return (
        to_device(rows, torch.long, device),
        to_device(token_ids, torch.long, device),
        to_device(biases, torch.float32, device),
    )


def _allowed_tokens(params: list[SamplingParams], device: torch.device):
    pairs = [(row, p.allowed_token_ids) for row, p in enumerate(params) if p.allowed_token_ids]
    if not pairs:
        return None
    return (
        to_device([row for row, _ in pairs], torch.long, device),
        to_device([row for row, ids in pairs for _ in ids], torch.long, device),
        to_device([token for _, ids in pairs for token in ids], torch.long, device),
    )
