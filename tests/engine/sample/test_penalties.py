"""Penalties applied at the tokens they change (engine/sample/penalties.py) against the dense
reference: every row's counts over the whole vocabulary, as vLLM computes them."""

from __future__ import annotations

import random
from types import SimpleNamespace

import torch

from engine.request import Request
from engine.sample import Sampler, SamplingBatch
from engine.sample.penalties import apply_penalties
from engine.sampling_params import SamplingParams
from engine.spec_decode.verify import DraftRow

VOCAB = 300


def dense_reference(logits: torch.Tensor, requests, params) -> torch.Tensor:
    """vLLM's penalties over [rows, vocab] counts of every row's prompt and output."""
    out = logits.clone()
    for row, (request, p) in enumerate(zip(requests, params, strict=True)):
        counts = torch.zeros(VOCAB)
        for token in request.output_token_ids:
            counts[token] += 1
        in_prompt = torch.zeros(VOCAB, dtype=torch.bool)
        in_prompt[request.prompt_token_ids] = True
        seen = in_prompt | (counts > 0)
        rep = p.repetition_penalty
        line = out[row]
        line.copy_(torch.where(seen, torch.where(line > 0, line / rep, line * rep), line))
        line -= p.frequency_penalty * counts
        line -= p.presence_penalty * (counts > 0).float()
    return out


def batch_of(requests) -> SamplingBatch:
    return SamplingBatch.from_requests(
        requests,
        generators={},
        eos_token_ids=frozenset({0}),
        vocab_size=VOCAB,
        device=torch.device("cpu"),
    )


def mixed_requests(rng: random.Random) -> list[Request]:
    """Rows with each penalty alone, all three, none; prompts and outputs that repeat tokens
    and share some with each other; a row with no output yet."""
    kinds = [
        SamplingParams(temperature=0),
        SamplingParams(temperature=0, repetition_penalty=1.3),
        SamplingParams(temperature=0, frequency_penalty=0.4),
        SamplingParams(temperature=0, presence_penalty=-0.7),
        SamplingParams(
            temperature=0, repetition_penalty=0.8, frequency_penalty=-0.2, presence_penalty=1.1
        ),
    ]
    requests = []
    for i in range(12):
        prompt = [rng.randrange(1, 120) for _ in range(rng.randrange(1, 60))]
        request = Request(f"r{i}", prompt, kinds[i % len(kinds)], max_tokens=500)
        for _ in range(0 if i == 6 else rng.randrange(1, 80)):
            request.append_output_token(rng.randrange(60, 200))
        requests.append(request)
    return requests


def test_penalties_at_their_tokens_equal_the_dense_reference():
    rng = random.Random(5)
    for _ in range(5):
        requests = mixed_requests(rng)
        logits = torch.randn(len(requests), VOCAB) * 4
        logits[3, 7] = float("-inf")  # a banned token stays banned
        expected = dense_reference(logits, requests, [r.sampling_params for r in requests])
        for _ in range(2):  # the second time from the prompts' kept token sets
            got = logits.clone()
            apply_penalties(got, batch_of(requests))
            assert torch.equal(got, expected)


def test_outputs_that_grow_between_steps_keep_matching_the_dense_reference():
    # The output's counts are kept on the request from step to step: tokens appended one at a
    # time and several at once (accepted drafts), repeats of tokens already counted and new
    # ones, a request whose first output arrives late.
    rng = random.Random(11)
    requests = mixed_requests(rng)
    params = [r.sampling_params for r in requests]
    for step in range(40):
        for i, request in enumerate(requests):
            appended = 3 if (step + i) % 7 == 0 else 1
            for _ in range(appended if step >= 10 or i != 6 else 0):
                request.append_output_token(rng.randrange(60, 200))
        logits = torch.randn(len(requests), VOCAB) * 4
        expected = dense_reference(logits, requests, params)
        apply_penalties(logits, batch_of(requests))
        assert torch.equal(logits, expected), f"step {step}"


def drafting_request(params: SamplingParams, drafts: list[int]):
    """A request with prompt [5, 6] and output [9] verifying ``drafts``, and its draft rows:
    position j samples as if its first j drafts were output already."""
    request = Request("r", [5, 6], params, max_tokens=16)
    request.append_output_token(9)
    request.spec = SimpleNamespace(draft_token_ids=drafts)
    return request, [DraftRow(request, j, None) for j in range(len(drafts) + 1)]


def test_draft_rows_leave_the_request_counts_as_its_output_alone():
    # A draft row counts its drafts on top of the request's output; the drafts it saw are
    # not the request's, so the request's next step (drafts rejected) counts none of them.
    params = SamplingParams(temperature=0, frequency_penalty=1.0, presence_penalty=0.5)
    request, rows = drafting_request(params, drafts=[9, 7])
    logits = torch.zeros(3, VOCAB)
    apply_penalties(logits, batch_of(rows))
    assert logits[:, 9].tolist() == [-1.5, -2.5, -2.5]
    assert logits[:, 7].tolist() == [0.0, 0.0, -1.5]
    request.spec = None  # the drafts were rejected; the request sampled 8
    request.append_output_token(8)
    logits = torch.zeros(1, VOCAB)
    apply_penalties(logits, batch_of([request]))
    assert (logits[0, 9].item(), logits[0, 7].item(), logits[0, 8].item()) == (-1.5, 0.0, -1.5)


def test_draft_positions_count_the_drafts_before_them_as_output():
    # Speculative verification: position j of a request samples as if its first j drafts
    # were already output tokens.
    params = SamplingParams(temperature=0, repetition_penalty=2.0, frequency_penalty=1.0)
    _, rows = drafting_request(params, drafts=[7, 7])
    logits = torch.full((3, VOCAB), 2.0)
    Sampler()(logits, batch_of(rows))
    assert logits[:, 5].tolist() == [1.0, 1.0, 1.0]  # prompt: repetition only
    assert logits[:, 9].tolist() == [0.0, 0.0, 0.0]  # 2 / 2 - 1 x 1
    assert logits[:, 7].tolist() == [2.0, 0.0, -1.0]  # unseen, then once, then twice


def test_logits_that_are_a_view_get_the_same_penalties():
    rng = random.Random(9)
    requests = mixed_requests(rng)
    logits = torch.randn(VOCAB, len(requests)).t()  # [rows, vocab], not contiguous
    expected = dense_reference(logits, requests, [r.sampling_params for r in requests])
    apply_penalties(logits, batch_of(requests))
    assert torch.equal(logits, expected)
