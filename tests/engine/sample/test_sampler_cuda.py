"""The sampler on a GPU: the inverse-transform draw, seeded rows, top-k/top-p and min-p on CUDA.

Skipped without CUDA (``pytest -m gpu tests/engine/sample`` on a GPU machine). On a CPU the same
behaviours are checked by test_sampler.py; here the tensors and the generators live on the
device, the whole-row sort serves top-k/top-p (the CPU's best-candidates path is CPU only), and
bfloat16 logits take the float32 running sum the draw relies on.
"""

from __future__ import annotations

import pytest
import torch

from engine.request import Request
from engine.sample import Sampler, SamplingBatch
from engine.sample.sampler import inverse_transform, search_running_sum
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


def cuda_batch(params_list, generators=None, vocab_size=8):
    requests = [
        Request(f"r{i}", [5, 6], params, max_tokens=16) for i, params in enumerate(params_list)
    ]
    return SamplingBatch.from_requests(
        requests,
        generators=generators or {},
        eos_token_ids=frozenset({0}),
        vocab_size=vocab_size,
        device=CUDA,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_draw_follows_the_distribution_on_cuda(dtype):
    """20,000 rows drawn at once: each token's share within 0.015 of its probability, and a
    token of probability zero never drawn."""
    probs = torch.tensor([0.1, 0.6, 0.0, 0.3], device=CUDA, dtype=dtype)
    rows = 20_000
    generator = torch.Generator(device=CUDA).manual_seed(0)
    tokens = inverse_transform(probs.expand(rows, -1).contiguous(), [None] * rows, generator)
    shares = torch.bincount(tokens, minlength=4).float().cpu() / rows
    assert shares[2] == 0
    assert torch.allclose(shares, probs.float().cpu(), atol=0.015)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_block_search_draws_from_a_large_vocabulary_on_cuda(dtype):
    """Rows of Qwen3's 151,936 tokens (256-token blocks, a short last one) with the mass in
    three blocks, the vocabulary's last token included: each token's share within 0.025 of its
    probability, no other token drawn; and on integer weights, the very tokens of one running
    sum over the row (search_running_sum, which the draw uses beyond 8,192 tokens)."""
    vocab, rows = 151_936, 4096
    probs = torch.zeros(vocab, device=CUDA, dtype=dtype)
    chosen = torch.tensor([3, 70_000, 70_001, vocab - 1], device=CUDA)
    probs[chosen] = torch.tensor([0.1, 0.3, 0.3, 0.3], device=CUDA, dtype=dtype)
    generator = torch.Generator(device=CUDA).manual_seed(0)
    tokens = inverse_transform(probs.expand(rows, -1).contiguous(), [None] * rows, generator)
    assert bool(torch.isin(tokens, chosen).all())
    shares = (tokens[:, None] == chosen).float().mean(dim=0).cpu()
    assert torch.allclose(shares, probs[chosen].float().cpu(), atol=0.025)

    weights = torch.randint(0, 8, (64, 10_000), generator=torch.Generator().manual_seed(0))
    u = torch.rand(64, 1, generator=torch.Generator().manual_seed(1))
    running = weights.float().cumsum(dim=-1)
    expected = torch.searchsorted(running, u * running[:, -1:], right=True).squeeze(1)
    found = search_running_sum(weights.to(CUDA, dtype), u.to(CUDA))
    assert torch.equal(found.cpu(), expected)


def test_seeded_rows_repeat_alone_or_batched_on_cuda():
    logits = torch.randn(1, 8, generator=torch.Generator().manual_seed(3)).to(CUDA)

    def run(rows):
        gens = {f"r{i}": torch.Generator(device=CUDA).manual_seed(42) for i in rows}
        params = [SamplingParams(seed=42) if i in rows else SamplingParams() for i in range(4)]
        sampler = Sampler(torch.Generator(device=CUDA).manual_seed(7))
        return [sampler(logits.repeat(4, 1), cuda_batch(params, gens)).token_ids for _ in range(10)]

    alone = [step[0] for step in run({0})]
    batched = run({0, 2})
    assert [step[0] for step in batched] == alone
    assert [step[2] for step in batched] == alone
    assert len(set(alone)) > 1  # really sampling, not greedy


def test_top_k_top_p_and_min_p_keep_the_draw_inside_their_sets_on_cuda():
    logits = torch.tensor([[0.0, 3.0, 5.0, 4.0, 0.0, 0.0, 0.0, 0.0]], device=CUDA)
    params = [
        SamplingParams(temperature=10.0, top_k=2),
        SamplingParams(temperature=1.0, top_p=0.7),
        SamplingParams(temperature=1.0, min_p=0.3),
    ]
    sampler = Sampler(torch.Generator(device=CUDA).manual_seed(0))
    seen = [set(), set(), set()]
    for _ in range(200):
        for i, token in enumerate(sampler(logits.repeat(3, 1), cuda_batch(params)).token_ids):
            seen[i].add(token)
    # top-k 2: tokens 2 and 3. top-p 0.7: 2 (0.65 of the mass) then 3. min-p 0.3 of the best
    # (token 2): 3 (0.37 of it) stays, 1 (0.14) goes.
    assert seen == [{2, 3}, {2, 3}, {2, 3}]
