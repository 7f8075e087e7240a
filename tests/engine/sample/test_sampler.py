"""Sampler on hand-made logits: greedy, filters, penalties, seeds, logprobs (no model)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.request import Request
from engine.sample import Sampler, SamplingBatch
from engine.sample.sampler import search_running_sum
from engine.sampling_params import SamplingParams

VOCAB = 8


def batch_for(params_list, outputs=None, generators=None, eos=frozenset({0})):
    requests = []
    for i, params in enumerate(params_list):
        req = Request(f"r{i}", [5, 6], params, max_tokens=params.max_tokens or 16)
        for tok in (outputs or {}).get(i, []):
            req.append_output_token(tok)
        requests.append(req)
    return SamplingBatch.from_requests(
        requests,
        generators=generators or {},
        eos_token_ids=eos,
        vocab_size=VOCAB,
        device=torch.device("cpu"),
    )


def logits_rows(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_greedy_picks_the_argmax_per_row():
    logits = logits_rows([0, 1, 5, 2, 0, 0, 0, 0], [9, 1, 5, 2, 0, 0, 0, 0])
    out = Sampler()(logits, batch_for([SamplingParams(temperature=0)] * 2))
    assert out.token_ids == [2, 0]
    assert out.logprobs == [None, None]


def test_top_k_one_and_tiny_top_p_are_greedy_even_at_high_temperature():
    logits = logits_rows([0, 1, 5, 2, 0, 0, 0, 0]).repeat(2, 1)
    params = [SamplingParams(temperature=5.0, top_k=1), SamplingParams(temperature=5.0, top_p=0.01)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert Sampler(gen)(logits.clone(), batch_for(params)).token_ids == [2, 2]


def test_top_k_keeps_sampling_inside_the_k_best():
    logits = logits_rows([0, 3, 5, 4, 0, 0, 0, 0])
    gen = torch.Generator().manual_seed(0)
    seen = {
        Sampler(gen)(
            logits.clone(), batch_for([SamplingParams(top_k=2, temperature=10)])
        ).token_ids[0]
        for _ in range(200)
    }
    assert seen == {2, 3}


def test_min_p_drops_tokens_far_below_the_best():
    logits = logits_rows([0, math.log(0.5), 0, math.log(0.01), -50, -50, -50, -50])
    gen = torch.Generator().manual_seed(0)
    seen = {
        Sampler(gen)(logits.clone(), batch_for([SamplingParams(min_p=0.1)])).token_ids[0]
        for _ in range(300)
    }
    assert seen == {0, 1, 2}


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.1, 0.6, 0.3, 0, 0, 0, 0, 0])
    logits = torch.log(probs.clamp_min(1e-30))[None, :]
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(VOCAB)
    for _ in range(2000):
        counts[Sampler(gen)(logits.clone(), batch_for([SamplingParams()])).token_ids[0]] += 1
    assert torch.allclose(counts / 2000, probs, atol=0.04)


def test_seeded_rows_repeat_alone_or_batched():
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(3))

    def run(rows):
        gens = {f"r{i}": torch.Generator().manual_seed(42) for i in rows}
        params = [SamplingParams(seed=42) if i in rows else SamplingParams() for i in range(4)]
        sampler = Sampler(torch.Generator().manual_seed(7))
        return [
            sampler(logits.repeat(4, 1), batch_for(params, generators=gens)).token_ids
            for _ in range(10)
        ]

    alone = [step[0] for step in run({0})]
    batched = run({0, 2})
    assert [step[0] for step in batched] == alone
    assert [step[2] for step in batched] == alone
    assert len(set(alone)) > 1  # really sampling, not greedy


def test_min_tokens_bans_eos_and_stop_tokens_until_reached():
    logits = logits_rows([9, 0, 0, 8, 0, 0, 0, 1]).repeat(2, 1)
    params = SamplingParams(temperature=0, min_tokens=2, stop_token_ids=[3])
    out = Sampler()(logits, batch_for([params, params], outputs={1: [4, 4]}))
    assert out.token_ids == [7, 0]  # row 0 has 0 outputs: EOS (0) and stop (3) banned


def test_a_stop_token_past_the_vocabulary_is_not_indexed_while_min_tokens_bans_stops():
    params = SamplingParams(temperature=0, min_tokens=2, stop_token_ids=[3, VOCAB + 5])
    out = Sampler()(logits_rows([9, 0, 0, 8, 0, 0, 0, 1]), batch_for([params]))
    assert out.token_ids == [7]


def test_logit_bias_is_added_before_the_argmax_and_the_draw():
    logits = logits_rows([0, 1, 5, 2, 0, 0, 0, 0]).repeat(3, 1)
    params = [
        SamplingParams(temperature=0, logit_bias={3: 3.5}),  # 5.5 beats 5
        SamplingParams(temperature=0, logit_bias={2: -100}),  # the best banned: 2 next
        SamplingParams(temperature=0),  # a row without bias is untouched
    ]
    biased = logits.clone()
    assert Sampler()(biased, batch_for(params)).token_ids == [3, 3, 2]
    assert biased[0, 3].item() == 5.5 and biased[1, 2].item() == -95.0
    assert torch.equal(biased[2], logits[2])
    gen = torch.Generator().manual_seed(0)
    forced = SamplingParams(temperature=1.5, logit_bias={6: 100})
    draws = {Sampler(gen)(logits[:1].clone(), batch_for([forced])).token_ids[0] for _ in range(50)}
    assert draws == {6}


def test_allowed_token_ids_keep_sampling_inside_the_list_and_greedy_takes_its_best():
    logits = logits_rows([0, 1, 5, 2, 0, 0, 0, 0]).repeat(2, 1)
    params = [
        SamplingParams(temperature=0, allowed_token_ids=[1, 3]),
        SamplingParams(temperature=0),
    ]
    assert Sampler()(logits.clone(), batch_for(params)).token_ids == [3, 2]
    gen = torch.Generator().manual_seed(0)
    sampled = SamplingParams(temperature=5.0, allowed_token_ids=[4, 5, 7])
    seen = {Sampler(gen)(logits[:1].clone(), batch_for([sampled])).token_ids[0] for _ in range(200)}
    assert seen == {4, 5, 7}


def test_allowed_tokens_do_not_bring_back_a_token_banned_before_min_tokens():
    params = SamplingParams(temperature=0, min_tokens=1, allowed_token_ids=[0, 4])
    out = Sampler()(logits_rows([9, 0, 0, 0, 1, 0, 0, 0]), batch_for([params]))
    assert out.token_ids == [4]  # EOS (0) is allowed but still banned this step


def test_penalties_follow_vllm_semantics():
    logits = logits_rows([2.0, -2.0, 1.0, 1.0, 0, 0, 0, 0])
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    batch = batch_for([params])  # prompt [5, 6]: no effect on 0..3
    out_logits = logits.clone()
    Sampler()(out_logits, batch)
    assert out_logits[0, :4].tolist() == [2.0, -2.0, 1.0, 1.0]
    batch = batch_for([params], outputs={0: [0, 1]})
    out_logits = logits.clone()
    Sampler()(out_logits, batch)
    assert out_logits[0, :4].tolist() == [1.0, -4.0, 1.0, 1.0]
    params = SamplingParams(temperature=0, presence_penalty=0.5, frequency_penalty=0.25)
    out_logits = logits.clone()
    Sampler()(out_logits, batch_for([params], outputs={0: [2, 2, 3]}))
    assert out_logits[0, 2].item() == pytest.approx(1.0 - 0.5 - 0.5)
    assert out_logits[0, 3].item() == pytest.approx(1.0 - 0.5 - 0.25)


def test_logprobs_report_the_raw_distribution_rank_and_top_k():
    logits = logits_rows([0, 1, 5, 2, 0, 0, 0, 0], [0, 1, 5, 2, 0, 0, 0, 0])
    expected = torch.log_softmax(logits[0], -1)
    params = [SamplingParams(temperature=0, logprobs=2), SamplingParams(temperature=0)]
    out = Sampler()(logits.clone(), batch_for(params))
    lp = out.logprobs[0]
    assert lp.token_id == 2 and lp.rank == 1
    assert lp.logprob == pytest.approx(expected[2].item())
    assert [t for t, _ in lp.top] == [2, 3]
    assert lp.top[1][1] == pytest.approx(expected[3].item())
    assert out.logprobs[1] is None


def test_rank_of_a_non_argmax_sample():
    logits = logits_rows([0, 1, 5, 2, 0, 0, 0, 0])
    params = SamplingParams(temperature=0, logprobs=0, min_tokens=1, stop_token_ids=[2])
    out = Sampler()(logits, batch_for([params]))
    assert out.token_ids == [3]
    assert out.logprobs[0].rank == 2 and out.logprobs[0].top == []


@pytest.mark.parametrize(
    "top_k, top_p",
    [
        ([40, 8192, 5, 300], None),  # top-k only; one row without it
        (None, [0.9, 0.5, 1.0, 0.95]),  # top-p only; one row without it
        ([40, 8192, 1, 300], [0.9, 0.8, 0.5, 1.0]),  # both, in every combination
    ],
)
def test_top_k_and_top_p_from_the_best_candidates_equal_sorting_whole_rows(top_k, top_p):
    """On a CPU the mask comes from each row's best tokens (torch.topk) instead of a sort of
    the whole vocabulary: the same tokens survive, with the same logits."""
    from engine.sample.sampler import best_candidates, sorted_whole

    vocab = 8192
    # Peaked rows, as a language model's are: a nucleus of 0.95 within a few hundred tokens.
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(0)) * 4
    k = torch.tensor(top_k) if top_k else None
    p = torch.tensor(top_p) if top_p else None
    fast = best_candidates(logits, k, p)
    assert fast is not None  # the candidates held every row's answer
    assert torch.equal(fast, sorted_whole(logits, k, p))


def test_a_nucleus_past_the_candidates_is_left_to_the_whole_sort():
    from engine.sample.sampler import (
        NUCLEUS_CANDIDATES,
        apply_top_k_top_p,
        best_candidates,
        sorted_whole,
    )

    flat = torch.zeros(2, 16 * NUCLEUS_CANDIDATES)  # the best 1,024 tokens hold 1/16 of it
    p = torch.tensor([0.5, 1.0])
    assert best_candidates(flat, None, p) is None
    kept = (apply_top_k_top_p(flat, None, p) > float("-inf")).sum(dim=-1)
    assert kept.tolist() == [8 * NUCLEUS_CANDIDATES + 1, 16 * NUCLEUS_CANDIDATES]
    assert torch.equal(apply_top_k_top_p(flat, None, p), sorted_whole(flat, None, p))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [1000, 10_000], ids=["whole-row", "blocks"])
def test_the_search_finds_the_token_a_whole_row_scan_finds(dtype, vocab):
    # Small integer weights add up exactly in any order, so the block sums' search must land
    # on the very token of one cumulative sum over the row; neither size is a whole number of
    # 256-token blocks, so the last block is short.
    generator = torch.Generator().manual_seed(0)
    weights = torch.randint(0, 8, (64, vocab), generator=generator).to(dtype)
    weights[:8, 200:] = 0  # mass in the first block only
    weights[8:16, : vocab - 10] = 0  # mass in the last block only
    u = torch.rand(64, 1, generator=generator)
    u[:4] = 0.0
    u[4:8] = 1 - 2**-24
    running = weights.float().cumsum(dim=-1)
    expected = torch.searchsorted(running, u * running[:, -1:], right=True).squeeze(1)
    assert torch.equal(search_running_sum(weights, u), expected)


def test_the_block_search_never_draws_a_token_of_probability_zero():
    # Softmax rows with most tokens masked, and draws at the very top of [0, 1), where the
    # block sums and the running sum inside a block, added in different orders, can disagree.
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(512, 151_936, generator=generator) * 4
    kept = torch.rand(512, 151_936, generator=generator) < 0.01
    kept[:, -1] = False  # the last token (the end of the tail block) always masked
    probs = torch.softmax(logits.masked_fill(~kept, float("-inf")), dim=-1)
    u = torch.rand(512, 1, generator=generator)
    u[::2] = 1 - torch.rand(256, 1, generator=generator) * 2**-20
    # A block whose small entries vanish when added one by one after a large one (the running
    # sum inside the block) but not when summed in lanes (the block's sum): the target can
    # fall past the end of the first.
    probs[0] = 0.0
    probs[0, 0], probs[0, 1:256] = 1.0, 1e-8
    u[0] = 1 - 1e-7
    tokens = search_running_sum(probs, u)
    assert bool((probs.gather(1, tokens[:, None]) > 0).all())
