"""The sampler: one batched pass from logits to token ids (and logprobs) for a whole step.

Order, as in vLLM: logprobs are read from the raw logits; then banned stop tokens (min_tokens),
allowed tokens, logit bias, penalties, greedy argmax; for the other rows temperature, top-k,
top-p, min-p and a draw. The draw is inverse transform sampling: with ``u ~ Uniform[0, 1)``,
the first token whose running sum of probabilities exceeds ``u`` times the row's total, which
picks token i with probability ``probs[i]`` (over the total: rows masked by top-k, top-p or
min-p need no renormalising), found over block sums first (``search_running_sum``). A seeded
request draws its ``u`` from its own generator, so its tokens do not depend on what else is in
the batch. One random number a row: the Gumbel-max draw
used before (``argmax(probs / q)``, ``q ~ Exponential(1)`` for every token of the vocabulary)
cost a CPU 0.8 ms a token for a 49,152-token vocabulary and 49 ms for a step of 64 rows,
against 0.05 and 1.4 ms here (torch's CPU ``exponential_`` runs at 14 ns an element on one
thread; bench/sampler_draw.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.scheduler_output import NO_TOKEN
from engine.device_copy import to_device
from engine.outputs import TokenLogprobs
from engine.sample.metadata import SamplingBatch
from engine.sample.penalties import apply_penalties


@dataclass(slots=True)
class SamplerOutput:
    # NO_TOKEN for a row whose every token was masked (its constraints together allow none).
    token_ids: list[int]
    logprobs: list[TokenLogprobs | None]


@dataclass(slots=True)
class Draw:
    """A step's sampled tokens, and what their logprobs need, still on the device: ``read``
    brings them to the host."""

    token_ids: torch.Tensor  # [B]
    # When some row asked for logprobs: each row's sampled logprob [B], its rank [B], and the
    # top-k logprobs and ids [B, k] (k the largest asked for; None when it is 0).
    chosen: torch.Tensor | None
    ranks: torch.Tensor | None
    top: tuple[torch.Tensor, torch.Tensor] | None
    num_logprobs: list[int | None]
    # [B] bool, rows with no token left unmasked; None when no row could have none.
    empty: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        """What ``read`` reads, in its order (LaunchedStep copies them to the host early)."""
        found = [self.token_ids, self.empty, self.chosen, self.ranks, *(self.top or ())]
        return [t for t in found if t is not None]

    def read(self, host: list[torch.Tensor] | None = None) -> SamplerOutput:
        """The tokens and logprobs as Python values; waits for the device, unless ``host``
        holds copies of ``tensors()`` already made."""
        values = [t.tolist() for t in (host if host is not None else self.tensors())]
        token_ids = values.pop(0)
        if self.empty is not None:
            # The device keeps a placeholder in the vocabulary (a next step may embed it).
            empty = values.pop(0)
            token_ids = [NO_TOKEN if e else t for t, e in zip(token_ids, empty, strict=True)]
        if self.chosen is None:
            return SamplerOutput(token_ids, [None] * len(token_ids))
        chosen, ranks = values[0], values[1]
        top_lp, top_ids = values[2:] if self.top is not None else (None, None)
        records: list[TokenLogprobs | None] = []
        for row, n in enumerate(self.num_logprobs):
            if n is None:
                records.append(None)
                continue
            top = list(zip(top_ids[row][:n], top_lp[row][:n], strict=True)) if n else []
            records.append(TokenLogprobs(token_ids[row], chosen[row], ranks[row], top))
        return SamplerOutput(token_ids, records)


class Sampler:
    def __init__(self, generator: torch.Generator | None = None) -> None:
        # Shared source of randomness for rows without their own seed.
        self.generator = generator

    def __call__(self, logits: torch.Tensor, batch: SamplingBatch) -> SamplerOutput:
        """logits: [B, vocab] fp32 (modified in place)."""
        return self.draw(logits, batch).read()

    def draw(self, logits: torch.Tensor, batch: SamplingBatch) -> Draw:
        """The same, left on the device: nothing here waits for it."""
        logprobs = None
        if batch.max_num_logprobs is not None:
            logprobs = torch.log_softmax(logits, dim=-1)
        for row, token_ids in batch.banned_tokens:
            logits[row, to_device(token_ids, torch.long, logits.device)] = float("-inf")
        if batch.allowed_tokens is not None:
            keep_only_allowed(logits, *batch.allowed_tokens)
        if batch.logit_bias is not None:
            rows, token_ids, biases = batch.logit_bias
            logits.index_put_((rows, token_ids), biases, accumulate=True)
        if batch.repetition_penalty is not None:
            apply_penalties(logits, batch)
        empty = None
        if batch.may_mask_all:  # the draw below still gives such a row a token in range
            empty = logits.amax(dim=-1) == float("-inf")
        if batch.all_greedy:
            sampled = logits.argmax(dim=-1)
        else:
            sampled = self._sample(logits, batch)
            if batch.any_greedy:
                sampled = torch.where(batch.greedy, logits.argmax(dim=-1), sampled)
        if logprobs is None:
            return Draw(sampled, None, None, None, batch.num_logprobs, empty)
        # Per row: the sampled token's logprob and rank, and the row's top-k alternatives.
        k = max(n for n in batch.num_logprobs if n is not None)
        chosen = logprobs.gather(1, sampled[:, None])  # [B, 1]
        ranks = (logprobs > chosen).sum(dim=-1) + 1
        top = logprobs.topk(k, dim=-1) if k > 0 else None
        return Draw(
            sampled,
            chosen.squeeze(1),
            ranks,
            tuple(top) if top else None,
            batch.num_logprobs,
            empty,
        )

    def _sample(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        logits = logits / batch.temperature[:, None]
        if batch.top_k is not None or batch.top_p is not None:
            logits = apply_top_k_top_p(logits, batch.top_k, batch.top_p)
        probs = torch.softmax(logits, dim=-1)
        if batch.min_p is not None:
            top = probs.max(dim=-1, keepdim=True).values
            probs = probs.masked_fill(probs < batch.min_p[:, None] * top, 0.0)
        return inverse_transform(probs, batch.generators, self.generator)


def keep_only_allowed(
    logits: torch.Tensor, restricted: torch.Tensor, rows: torch.Tensor, token_ids: torch.Tensor
) -> None:
    """Mask every token of the ``restricted`` rows but the (row, token id) pairs given, in
    place. What an earlier mask (grammar, min_tokens) removed stays removed."""
    kept = logits[rows, token_ids]
    logits[restricted] = float("-inf")
    logits[rows, token_ids] = kept


def inverse_transform(
    probs: torch.Tensor,
    generators: list[torch.Generator | None],
    default: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of ``probs`` [B, vocab] (non-negative, not necessarily normalised),
    drawn with probability proportional to its entry; row i's uniform number comes from
    ``generators[i]`` when it has one (``draw_uniform``: advance_generator replays it), from
    ``default`` otherwise."""
    u = torch.empty(probs.shape[0], 1, dtype=torch.float32, device=probs.device)
    own = [i for i, g in enumerate(generators) if g is not None]
    if len(own) < len(generators):
        u.uniform_(generator=default)
    for i in own:
        draw_uniform(u[i], generators[i])
    return search_running_sum(probs, u)


# Tokens per block of the draw's search: a row's running sum is taken over block sums (one read
# of the row, and a scan of vocab / 256 values), then inside the one block where it crosses.
SEARCH_BLOCK = 256
# Up to this many tokens a row is scanned whole: the blocks' few extra operations cost more
# than they save (256 rows of 1,024 tokens: 0.14 ms scanned whole, 0.25 ms by blocks, on a CPU).
WHOLE_ROW_SEARCH = 8192


def search_running_sum(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose running sum of ``probs`` exceeds ``u`` [B, 1] (in [0, 1))
    times the row's total; never a token of probability 0.

    A scan of a whole row of a large vocabulary (``cumsum``) was the draw's largest cost: on an
    H200 its kernel took 0.31 ms of a 7.3 ms step at 256 rows of Qwen3's 151,936 tokens, and
    0.2 ms at 23 rows; on a CPU 13 ms for 64 such rows, against about 1 ms by blocks
    (bench/sampler_draw.py). Sums are float32 even for bfloat16 probabilities, whose 8-bit
    mantissa would lose the tail."""
    rows, vocab = probs.shape
    if vocab <= WHOLE_ROW_SEARCH:
        running = probs.cumsum(dim=-1, dtype=torch.float32)
        target = _held_below_total(u * running[:, -1:], running)
        token = torch.searchsorted(running, target, right=True).squeeze(1)
        return token.clamp_(max=vocab - 1)
    whole = vocab - vocab % SEARCH_BLOCK
    sums = probs[:, :whole].reshape(rows, -1, SEARCH_BLOCK).sum(dim=-1, dtype=torch.float32)
    if whole < vocab:
        tail = probs[:, whole:].sum(dim=-1, keepdim=True, dtype=torch.float32)
        sums = torch.cat((sums, tail), dim=1)
    running = sums.cumsum(dim=-1)
    target = _held_below_total(u * running[:, -1:], running)
    # right=True here and below: the first entry whose running sum exceeds the target, so an
    # entry of 0 (its sum equal to the one before) is never the answer.
    block = torch.searchsorted(running, target, right=True)
    before = torch.where(block > 0, running.gather(1, (block - 1).clamp_(min=0)), 0.0)
    columns = block * SEARCH_BLOCK + torch.arange(SEARCH_BLOCK, device=probs.device)
    inside = probs.gather(1, columns.clamp(max=vocab - 1)).float()
    inside.masked_fill_(columns >= vocab, 0.0)  # the tail block's padding
    inside_running = inside.cumsum(dim=-1)
    offset = torch.searchsorted(
        inside_running, _held_below_total(target - before, inside_running), right=True
    )
    # The clamp only matters for a row with no probability at all (every token masked: NaN
    # after the softmax), whose token must still be one the next step can embed.
    return (block * SEARCH_BLOCK + offset).squeeze(1).clamp_(max=vocab - 1)


def _held_below_total(target: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
    """``target`` [B, 1] kept below its row's total (the last of ``running``), so that a search
    for the first running sum above it ends inside the row: rounding can bring it up to the
    total (``u`` within an ulp of 1; a block's entries added up in another order than its sum)."""
    total = running[:, -1:]
    return torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))


def draw_uniform(out: torch.Tensor, generator: torch.Generator) -> None:
    """A seeded row's one draw of a step (``out``: one element); advance_generator makes the
    same draws to replay a generator past tokens already sampled."""
    out.uniform_(generator=generator)


# On a CPU a nucleus (top-p) is first looked for among each row's best this many tokens.
NUCLEUS_CANDIDATES = 1024


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """Mask everything outside each row's top-k and nucleus (top-p); at least one token stays.

    On a CPU, from each row's best few tokens when they hold the answer (``best_candidates``):
    sorting a whole row cost 3 ms for a 49,152-token vocabulary and 100 ms for 64 rows, where
    finding the best 1,024 costs a tenth of that. Elsewhere (a GPU sorts fast, and the check
    below would wait for the device) the whole rows are sorted."""
    if logits.device.type == "cpu":
        masked = best_candidates(logits, top_k, top_p)
        if masked is not None:
            return masked
    return sorted_whole(logits, top_k, top_p)


def best_candidates(
    logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor | None:
    """``sorted_whole``'s mask found among each row's best ``c`` tokens (``torch.topk``): ``c``
    the largest top-k in use, at least NUCLEUS_CANDIDATES with a top-p. None when that would
    not be cheaper, or when a row's nucleus reaches past its candidates (they hold at most
    top_p of its mass), so only ``sorted_whole`` can find it."""
    rows, vocab = logits.shape
    no_rows = torch.zeros(rows, dtype=torch.bool, device=logits.device)
    k_limited = top_k < vocab if top_k is not None else no_rows
    p_limited = top_p < 1.0 if top_p is not None else no_rows
    c = int(top_k[k_limited].max()) if bool(k_limited.any()) else 0
    if bool(p_limited.any()):
        c = max(c, NUCLEUS_CANDIDATES)
    if c == 0 or 4 * c > vocab:
        return None
    values, index = logits.topk(c, dim=-1)  # sorted, best first
    if top_k is not None:
        ranks = torch.arange(c, device=logits.device)
        values = values.masked_fill(ranks[None, :] >= top_k[:, None], float("-inf"))
    if top_p is not None:
        # Each candidate's probability as sorted_whole's softmax gives it: over the top-k's
        # survivors (all among the candidates), or without a top-k over the whole row.
        total = torch.where(
            k_limited[:, None],
            values.logsumexp(dim=-1, keepdim=True),
            logits.logsumexp(dim=-1, keepdim=True),
        )
        probs = (values - total).exp()
        mass = probs.cumsum(dim=-1)
        if bool((p_limited & ~k_limited & (mass[:, -1] <= top_p)).any()):
            return None
        drop = (mass - probs > top_p[:, None]) & p_limited[:, None]  # as in sorted_whole
        values = values.masked_fill(drop, float("-inf"))
    masked = torch.full_like(logits, float("-inf")).scatter_(-1, index, values)
    unlimited = ~(k_limited | p_limited)  # rows of the batch that use neither
    if bool(unlimited.any()):
        masked = torch.where(unlimited[:, None], logits, masked)
    return masked


def sorted_whole(
    logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """The top-k and nucleus mask from each row sorted whole (the reference)."""
    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
    if top_k is not None:
        ranks = torch.arange(logits.shape[-1], device=logits.device)
        sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= top_k[:, None], float("-inf"))
    if top_p is not None:
        probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens before it already hold top_p of the mass. A row at 1.0
        # keeps everything: its rounded running sum can pass 1.0 and would drop the tail.
        before = probs.cumsum(dim=-1) - probs
        drop = (before > top_p[:, None]) & (top_p[:, None] < 1.0)
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, sorted_idx, sorted_logits)
