"""Async scheduling (engine/async_steps.py): steps queued behind the step in flight give the
tokens synchronous steps give, for every way a request ends or is cut short, on the CPU where
the same code runs without the overlap."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.engine_runs import random_prompts, run_to_completion


def make_engine(path, async_scheduling: bool, **overrides) -> LLMEngine:
    overrides.setdefault("num_gpu_blocks", 512)
    overrides.setdefault("max_model_len", 512)
    overrides.setdefault("enable_speculative_decoding", False)
    return LLMEngine(EngineConfig(model=path, async_scheduling=async_scheduling, **overrides))


def greedy_tokens(path, prompt, max_tokens: int) -> list[int]:
    engine = make_engine(path, False)
    engine.add_request("probe", prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return run_to_completion(engine)[("probe", 0)]["tokens"]


def workload(path) -> list[tuple[str, list[int], SamplingParams]]:
    """Requests that end every way: length, a stop token (with and without min_tokens),
    penalties (which need every token on the host), logprobs, seeds, several samples, and
    sampled requests without a seed that only fill the batch."""
    prompts = random_prompts(24, 5, 90, seed=3)
    stop_at = greedy_tokens(path, prompts[0], 12)  # tokens a stop list can name
    requests = []
    for i, prompt in enumerate(prompts):
        params = {"temperature": 0.0, "max_tokens": 6 + (i * 7) % 30, "ignore_eos": True}
        if i == 0:
            params.update(stop_token_ids=[stop_at[4]], max_tokens=30)
        elif i == 1:
            params.update(stop_token_ids=[stop_at[1]], min_tokens=7, max_tokens=30)
            prompt = prompts[0]
        elif i % 6 == 2:
            params.update(repetition_penalty=1.3, frequency_penalty=0.4, max_tokens=8)
        elif i % 6 == 3:
            params.update(logprobs=3)
        elif i % 6 == 4:
            params.update(temperature=0.9, seed=100 + i, n=2)
        elif i % 6 == 5:
            params.update(temperature=0.9)  # unseeded: differs with the batch, not compared
        requests.append((f"r{i}", prompt, SamplingParams(**params)))
    return requests


def run(engine, requests):
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
    return run_to_completion(engine)


def comparable(results, requests) -> dict:
    """(tokens, finish reason, (token id, rank) of each logprob, the logprobs) per sample of
    the requests whose tokens do not depend on the batch."""
    seeded = {rid for rid, _, p in requests if p.temperature == 0.0 or p.seed is not None}
    out = {}
    for (rid, index), entry in results.items():
        if rid in seeded:
            logprobs = [lp for d in entry["deltas"] for lp in (d.new_logprobs or [])]
            out[(rid, index)] = (
                entry["tokens"],
                entry["finish"],
                [(lp.token_id, lp.rank) for lp in logprobs],
                [lp.logprob for lp in logprobs],
            )
    return out


def assert_same(got: dict, expected: dict) -> None:
    """The same tokens, ends and ranks; logprobs equal to float noise (a batch made of other
    requests may change a logit's last bits)."""
    assert got.keys() == expected.keys()
    for key, (tokens, finish, ranks, logprobs) in expected.items():
        assert got[key][:3] == (tokens, finish, ranks), key
        assert got[key][3] == pytest.approx(logprobs, abs=1e-4), key


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"num_gpu_blocks": 40, "max_num_batched_tokens": 64},  # preempts, chunks prompts
        {"enable_speculative_decoding": True},  # few requests: drafts, so steps drain
        {"enable_prefix_caching": False, "max_num_seqs": 5},
    ],
    ids=["plain", "preempting", "speculating", "no-cache-few-seqs"],
)
def test_async_steps_give_the_tokens_of_synchronous_steps(tiny_engine_path, overrides):
    requests = workload(tiny_engine_path)
    sync = make_engine(tiny_engine_path, False, **overrides)
    expected = comparable(run(sync, requests), requests)
    engine = make_engine(tiny_engine_path, True, **overrides)
    got = comparable(run(engine, requests), requests)
    assert_same(got, expected)
    assert engine.async_steps.num_launched_behind > 0
    assert engine.async_steps.in_flight is None
    assert engine.stats().num_running == 0
    assert engine.stats().num_free_blocks == engine.stats().num_total_blocks
    if "num_gpu_blocks" in overrides:
        assert engine.stats().num_preemptions > 0
    tokens, finish, *_ = got[("r0", 0)]
    assert finish == "stop" and len(tokens) < 30
    banned = requests[1][2].stop_token_ids[0]  # sampled second unbanned, banned until 7
    tokens, finish, *_ = got[("r1", 0)]
    assert len(tokens) >= 7 and banned not in tokens[:7]


def test_blocks_written_behind_a_finished_request_serve_later_prefix_hits(tiny_engine_path):
    """A request's last token is computed by no step; its block, cached once full, must hold
    the right keys when a later prompt (the first one plus its output) hits it."""
    prompt = random_prompts(1, 29, 29, seed=8)[0]
    params = SamplingParams(temperature=0.0, max_tokens=19, ignore_eos=True)  # 48 tokens
    engine = make_engine(tiny_engine_path, True, max_num_seqs=4)
    first = run(engine, [("a", prompt, params)])[("a", 0)]["tokens"]
    follow = prompt + first + [7, 8, 9]
    hit = run(engine, [("b", follow, params)])[("b", 0)]
    cold = run(make_engine(tiny_engine_path, False), [("b", follow, params)])[("b", 0)]
    assert hit["deltas"][-1].num_cached_tokens >= 32
    assert hit["tokens"] == cold["tokens"]


def test_an_abort_while_its_step_is_in_flight_ends_it_there(tiny_engine_path):
    engine = make_engine(tiny_engine_path, True)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    for i, prompt in enumerate(random_prompts(4, 10, 30, seed=5)):
        engine.add_request(f"r{i}", prompt, params)
    seen: dict[str, list] = {}
    for _ in range(6):
        for delta in engine.step():
            seen.setdefault(delta.request_id, []).append(delta)
    assert engine.async_steps.in_flight is not None
    engine.abort_request("r1")
    for key, entry in run_to_completion(engine).items():
        seen.setdefault(key[0], []).extend(entry["deltas"])
    aborted = seen["r1"]
    assert aborted[-1].finished and aborted[-1].finish_reason == "abort"
    assert sum(len(d.new_token_ids) for d in aborted) < 40
    for rid in ("r0", "r2", "r3"):
        assert sum(len(d.new_token_ids) for d in seen[rid]) == 40
        assert seen[rid][-1].finish_reason == "length"
    assert engine.stats().num_free_blocks == engine.stats().num_total_blocks


def test_steps_with_penalties_are_queued_behind_the_one_in_flight(tiny_engine_path):
    """A penalized request's last token is still on the device when the next step samples:
    its share of each penalty is applied there, and the tokens are those of synchronous
    steps, which see every token on the host."""
    kinds = [
        {"repetition_penalty": 1.6},
        {"frequency_penalty": 1.5},
        {"presence_penalty": 2.0},
        {"repetition_penalty": 0.6, "frequency_penalty": -0.5, "presence_penalty": 1.0},
    ]
    prompts = random_prompts(8, 5, 40, seed=21)
    base = {"temperature": 0.0, "max_tokens": 40, "ignore_eos": True}
    requests = [
        (f"r{i}", prompt, SamplingParams(**base, **kinds[i % len(kinds)]))
        for i, prompt in enumerate(prompts)
    ]
    plain = [(rid, prompt, SamplingParams(**base)) for rid, prompt, _ in requests]
    unpenalized = comparable(run(make_engine(tiny_engine_path, False), plain), plain)
    expected = comparable(run(make_engine(tiny_engine_path, False), requests), requests)
    engine = make_engine(tiny_engine_path, True)
    got = comparable(run(engine, requests), requests)
    assert_same(got, expected)
    assert engine.async_steps.num_launched_behind >= 30  # the steps did not wait for the host
    # The penalties change what every request samples: the comparison is not vacuous.
    assert all(expected[key] != unpenalized[key] for key in expected)


def test_a_penalized_request_behind_a_step_that_sampled_nothing(tiny_engine_path):
    """The step in flight computes only a chunk of a long prompt (it samples nothing) when a
    penalized request's first step is queued behind it: there is no pending token to take."""
    long_prompt, short_prompt = random_prompts(2, 200, 200, seed=31)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    penalized = SamplingParams(
        temperature=0.0, max_tokens=12, ignore_eos=True, presence_penalty=1.5
    )
    requests = [("long", long_prompt, params), ("short", short_prompt[:20], penalized)]

    def run_interleaved(engine) -> dict:
        engine.add_request("long", long_prompt, params)
        engine.step()  # the long prompt's first chunk, in flight (async) or done (sync)
        engine.add_request("short", short_prompt[:20], penalized)
        return comparable(run_to_completion(engine), requests)

    options = {"max_num_batched_tokens": 48}
    expected = run_interleaved(make_engine(tiny_engine_path, False, **options))
    engine = make_engine(tiny_engine_path, True, **options)
    assert_same(run_interleaved(engine), expected)
    assert engine.async_steps.num_launched_behind > 0
