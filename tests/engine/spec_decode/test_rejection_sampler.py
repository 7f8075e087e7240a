"""Verification keeps the sampler's distribution: a statistical test over many draws on fixed
logits (small vocabulary), through the real sampler and verifier, no model."""

from __future__ import annotations

import torch

from engine.request import Request
from engine.sample import Sampler, SamplingBatch
from engine.sampling_params import SamplingParams
from engine.spec_decode.ngram import NgramIndex
from engine.spec_decode.speculator import SpecState
from engine.spec_decode.verify import DraftVerifier, draft_rows, num_accepted

VOCAB = 6
NUM_DRAWS = 10_000


def _requests(params: SamplingParams, drafts: list[int], count: int) -> list[Request]:
    requests = []
    for i in range(count):
        r = Request(f"r{i}", [1, 2, 3], params, max_tokens=64)
        r.spec = SpecState(NgramIndex(2, 4), 8, draft_token_ids=list(drafts))
        requests.append(r)
    return requests


def _verify(logits_per_row: torch.Tensor, params: SamplingParams, drafts: list[int]):
    """Sample every request's rows with the engine's sampler and settle its drafts."""
    requests = _requests(params, drafts, NUM_DRAWS)
    rows = [row for r in requests for row in draft_rows(r, len(drafts))]
    logits = logits_per_row.repeat(NUM_DRAWS, 1)  # [NUM_DRAWS * (k + 1), VOCAB]
    batch = SamplingBatch.from_requests(
        rows, generators={}, eos_token_ids=frozenset(), vocab_size=VOCAB, device=logits.device
    )
    verifier = DraftVerifier({})
    sampled = Sampler(torch.Generator().manual_seed(0))(logits, batch)
    for row, token, lp in zip(rows, sampled.token_ids, sampled.logprobs, strict=True):
        verifier.add(row, token, lp)
    return verifier.settle()


def _assert_close(counts: torch.Tensor, probs: torch.Tensor, n: int) -> None:
    """Each frequency within 5 standard errors of its probability."""
    freq = counts / n
    tolerance = 5 * torch.sqrt(probs * (1 - probs) / n) + 1e-3
    assert torch.all((freq - probs).abs() <= tolerance), (freq, probs)


def test_a_draft_is_accepted_with_its_probability_and_the_output_keeps_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    params = SamplingParams(temperature=0.8)
    probs = torch.softmax(logits[0] / 0.8, -1)
    draft = 1
    settled = _verify(logits.repeat(2, 1), params, [draft])
    first = torch.zeros(VOCAB)
    rejected = torch.zeros(VOCAB)
    num_accepts = 0
    for token, _, outcome in settled.values():
        if outcome.accepted_token_ids:
            num_accepts += 1
            first[draft] += 1
        else:
            first[token] += 1
            rejected[token] += 1
    # Accepted with probability p(t) ...
    _assert_close(torch.tensor([num_accepts]), probs[draft : draft + 1], NUM_DRAWS)
    # ... on rejection a sample of the residual: p without t, renormalised ...
    residual = probs.clone()
    residual[draft] = 0
    residual /= residual.sum()
    assert rejected[draft] == 0
    _assert_close(rejected, residual, int(rejected.sum()))
    # ... so the first emitted token follows p exactly.
    _assert_close(first, probs, NUM_DRAWS)


def test_each_position_keeps_its_distribution_with_top_k_and_min_p():
    # Two drafts; each row has its own logits. The token after an accepted draft is sampled
    # from the next row's (processed) distribution.
    logits = torch.tensor(
        [
            [0.0, 3.0, 2.5, 1.0, 0.0, -1.0],
            [1.5, 0.0, 1.4, 0.3, 2.0, -2.0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    params = SamplingParams(temperature=1.0, top_k=4, min_p=0.05)
    drafts = [2, 4]
    settled = _verify(logits, params, drafts)

    def processed(row: torch.Tensor) -> torch.Tensor:
        kept = row.clone()
        kept[row < row.topk(4).values[-1]] = float("-inf")
        p = torch.softmax(kept, -1)
        p[p < 0.05 * p.max()] = 0
        return p / p.sum()

    p0, p1 = processed(logits[0]), processed(logits[1])
    first, second = torch.zeros(VOCAB), torch.zeros(VOCAB)
    num_second = 0
    for token, _, outcome in settled.values():
        emitted = [*outcome.accepted_token_ids, token]
        first[emitted[0]] += 1
        if len(emitted) > 1:
            second[emitted[1]] += 1
            num_second += 1
    _assert_close(first, p0, NUM_DRAWS)
    # The second token is only emitted after the first draft was accepted; then it follows
    # the second row's distribution.
    _assert_close(torch.tensor([num_second]), p0[drafts[0] : drafts[0] + 1], NUM_DRAWS)
    _assert_close(second, p1, num_second)


def test_greedy_accepts_exactly_the_drafts_that_match_the_argmax():
    assert num_accepted([5, 6, 7], [5, 6, 9, 1]) == 2
    assert num_accepted([5, 6, 7], [4, 6, 7, 1]) == 0
    assert num_accepted([5, 6, 7], [5, 6, 7, 1]) == 3
    logits = torch.tensor([[0.0, 5.0, 0, 0, 0, 0], [0, 0, 0, 0, 7.0, 0], [3.0, 0, 0, 0, 0, 0]])
    for (token, _, outcome), expected in zip(
        _verify(logits, SamplingParams(temperature=0.0), [1, 2]).values(),
        [([1], 4)] * 3,
        strict=False,
    ):
        assert (outcome.accepted_token_ids, token) == expected
