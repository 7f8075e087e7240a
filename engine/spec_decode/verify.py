"""Verification of draft tokens in the step that computes them: the sampler's rows for a
request with k drafts, and the rule that turns the sampled tokens into accepted ones.

A request with drafts ``d1..dk`` runs ``[last token, d1..dk]`` through the model; row j
(0 <= j <= k) holds the logits after ``d1..dj``. Every row is sampled as the ordinary sampler
would sample that position (same temperature, top-k/p, min-p, penalties over the output so far
including ``d1..dj``, min_tokens, grammar mask after ``d1..dj``), giving ``s0..sk``. The
output is ``s0..sa`` where ``a`` is the first j with ``sj != d(j+1)`` (or k): the accepted
drafts followed by one sampled token.

This is the standard speculative rejection rule for a draft distribution that is a point mass
at ``t``: accept ``t`` with probability ``min(1, p(t)/q(t)) = p(t)``; on rejection sample from
the residual ``max(0, p - q)`` normalised, which is ``p`` with ``t`` removed, renormalised.
Sampling ``s ~ p`` and accepting exactly when ``s == t`` does both at once: ``P(s == t) =
p(t)``, and given ``s != t``, ``s`` follows ``p`` without ``t``. So every emitted token has
exactly the distribution the non-speculative sampler gives it; for greedy rows ``s`` is the
argmax and the output is token-identical. A seeded request's generator is rewound to where
``a + 1`` ordinary draws would leave it, so its tokens do not depend on the drafts either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.resume import advance_generator
from engine.spec_decode.speculator import DraftOutcome

if TYPE_CHECKING:
    import torch

    from engine.request import Request
    from engine.structured.state import GrammarState


class DraftRow:
    """The sampler's view of row ``offset`` of a request with drafts: the request as it
    would be after accepting its first ``offset`` drafts."""

    __slots__ = ("grammar", "offset", "request")

    def __init__(self, request: Request, offset: int, grammar: GrammarState | None) -> None:
        self.request = request
        self.offset = offset
        self.grammar = grammar

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def sampling_params(self):
        return self.request.sampling_params

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.request.prompt_token_ids

    @property
    def prompt_token_set(self):
        return self.request.prompt_token_set

    @prompt_token_set.setter
    def prompt_token_set(self, value) -> None:
        self.request.prompt_token_set = value  # every position shares the request's prompt

    @property
    def output_counts(self):
        return self.request.output_counts

    @output_counts.setter
    def output_counts(self, value) -> None:
        self.request.output_counts = value  # counts of the request's output, shared

    @property
    def row_drafts(self) -> list[int]:
        return self.request.spec.draft_token_ids[: self.offset]

    @property
    def output_token_ids(self) -> list[int]:
        return self.request.output_token_ids + self.row_drafts

    @property
    def num_output_tokens(self) -> int:
        return self.request.num_output_tokens + self.offset

    @property
    def num_pending_tokens(self) -> int:
        return self.request.num_pending_tokens  # 0: drafts are verified in synchronous steps


def draft_rows(request: Request, num_drafts: int) -> list[DraftRow]:
    """One row per verified position, each with the grammar state after its drafts."""
    grammar = request.grammar
    rows = [DraftRow(request, 0, grammar)]
    for j, token in enumerate(request.spec.draft_token_ids[:num_drafts]):
        if grammar is not None:
            grammar = grammar.fork(token)
        rows.append(DraftRow(request, j + 1, grammar))
    return rows


def num_accepted(drafts: list[int], sampled: list[int]) -> int:
    """How many leading drafts the sampled tokens confirm (``sampled[j]`` follows the
    first j drafts, so it is compared with ``drafts[j]``)."""
    a = 0
    while a < len(drafts) and sampled[a] == drafts[a]:
        a += 1
    return a


class DraftVerifier:
    """Gathers one step's sampled rows per request with drafts and settles them."""

    def __init__(self, generators: dict[str, torch.Generator]) -> None:
        self._generators = generators
        self._rows: dict[str, tuple[Request, list[int], list]] = {}
        self._saved: dict[str, torch.Tensor] = {}

    def save_generators(self, rows: list, will_draw: bool) -> None:
        """Before sampling: remember each seeded request's generator, to rewind it after."""
        if not will_draw:
            return
        for row in rows:
            if isinstance(row, DraftRow) and row.offset == 0:
                generator = self._generators.get(row.request_id)
                if generator is not None:
                    self._saved[row.request_id] = generator.get_state()

    def add(self, row: DraftRow, token: int, logprobs) -> None:
        entry = self._rows.setdefault(row.request_id, (row.request, [], []))
        entry[1].append(token)
        entry[2].append(logprobs)

    def settle(self) -> dict[str, tuple[int, object, DraftOutcome]]:
        """Per request: (the token sampled after the accepted drafts, its logprobs, outcome)."""
        settled = {}
        for rid, (request, sampled, logprobs) in self._rows.items():
            drafts = request.spec.draft_token_ids[: len(sampled) - 1]
            a = num_accepted(drafts, sampled)
            outcome = DraftOutcome(len(drafts), drafts[:a], logprobs[:a])
            settled[rid] = (sampled[a], logprobs[a], outcome)
            saved = self._saved.get(rid)
            if saved is not None:
                generator = self._generators[rid]
                generator.set_state(saved)
                advance_generator(generator, a + 1)
        return settled
