"""LLMEngine on a tiny random-weight llama: batching invariance, prefix caching, seeds, bad input."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.tooling.random_lora import make_random_adapter
from tests.support.engine_runs import random_prompts, run_to_completion

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def make_engine(path, **overrides) -> LLMEngine:
    overrides.setdefault("num_gpu_blocks", 512)
    overrides.setdefault("max_model_len", 512)
    return LLMEngine(EngineConfig(model=path, **overrides))


def mixed_batch(engine, probes):
    """32 requests: the probes (greedy) among sampled ones of other lengths and settings."""
    others = random_prompts(32 - len(probes), 5, 120, seed=11)
    for i, prompt in enumerate(others):
        params = SamplingParams(
            temperature=0.8 if i % 2 else 0.0,
            top_p=0.9,
            top_k=50 if i % 3 else 0,
            max_tokens=8 + (i * 5) % 40,
            ignore_eos=True,
            seed=i if i % 4 == 0 else None,
        )
        engine.add_request(f"other-{i}", prompt, params)
    for i, prompt in enumerate(probes):
        engine.add_request(f"probe-{i}", prompt, GREEDY)


@pytest.fixture(scope="module")
def probes():
    return random_prompts(4, 20, 100, seed=5)


@pytest.fixture(scope="module")
def alone_outputs(tiny_engine_path, probes):
    outputs = []
    for prompt in probes:
        engine = make_engine(tiny_engine_path)
        engine.add_request("solo", prompt, GREEDY)
        outputs.append(run_to_completion(engine)[("solo", 0)]["tokens"])
    return outputs


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_num_batched_tokens": 64},  # chunked prefill, small budget: many chunks
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 512},
        {"num_gpu_blocks": 40, "max_num_batched_tokens": 128},  # forces preemption
    ],
    ids=["chunked", "unchunked", "preempting"],
)
def test_greedy_output_is_the_same_alone_and_in_a_mixed_batch(
    tiny_engine_path, probes, alone_outputs, overrides
):
    engine = make_engine(tiny_engine_path, **overrides)
    mixed_batch(engine, probes)
    results = run_to_completion(engine)
    for i, expected in enumerate(alone_outputs):
        assert results[(f"probe-{i}", 0)]["tokens"] == expected
        assert results[(f"probe-{i}", 0)]["finish"] == "length"
    assert len(results) == 32
    assert all(len(r["tokens"]) > 0 for r in results.values())
    if "num_gpu_blocks" in overrides:
        assert engine.stats().num_preemptions > 0
    stats = engine.stats()
    assert stats.num_free_blocks == stats.num_total_blocks
    assert stats.num_running == stats.num_waiting == 0


def test_shared_prefix_is_cached_only_under_the_same_salt_and_adapter(tiny_engine_path, tmp_path):
    engine = make_engine(tiny_engine_path, block_size=16, max_lora_rank=8)
    sql = engine.load_adapter("sql", str(make_random_adapter(tiny_engine_path, tmp_path / "sql")))
    prefix = random_prompts(1, 64, 64, seed=3)[0]  # exactly 4 blocks
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    engine.add_request("first", [*prefix, 7, 8, 9], params, cache_salt="tenant-a")
    first = run_to_completion(engine)[("first", 0)]["deltas"]
    assert first[0].num_cached_tokens == 0

    cases = {
        "same": {"cache_salt": "tenant-a"},
        "other-salt": {"cache_salt": "tenant-b"},
        "other-adapter": {"cache_salt": "tenant-a", "adapter": sql},
    }
    cached = {}
    for name, kwargs in cases.items():
        before = engine.stats()
        engine.add_request(name, [*prefix, 11, 12], params, **kwargs)
        result = run_to_completion(engine)[(name, 0)]
        cached[name] = result["deltas"][0].num_cached_tokens
        after = engine.stats()
        if name == "same":
            # Only the 2 new tokens are computed: prompt counters move by what was cached.
            assert after.prefix_cache_hits - before.prefix_cache_hits == 64
    assert cached == {"same": 64, "other-salt": 0, "other-adapter": 0}


def test_prefix_cache_hit_gives_the_same_tokens_as_a_cold_run(tiny_engine_path):
    prompt = random_prompts(1, 70, 70, seed=4)[0]
    warm = make_engine(tiny_engine_path)
    warm.add_request("a", prompt, GREEDY)
    cold_tokens = run_to_completion(warm)[("a", 0)]["tokens"]
    warm.add_request("b", prompt, GREEDY)
    result = run_to_completion(warm)[("b", 0)]
    assert result["deltas"][0].num_cached_tokens == 64
    assert result["tokens"] == cold_tokens


def test_seeded_sampling_is_reproducible_alone_or_batched(tiny_engine_path):
    prompt = random_prompts(1, 30, 30, seed=8)[0]
    params = SamplingParams(temperature=1.0, seed=1234, max_tokens=24, ignore_eos=True)
    engine = make_engine(tiny_engine_path)
    engine.add_request("alone", prompt, params)
    alone = run_to_completion(engine)[("alone", 0)]["tokens"]
    engine = make_engine(tiny_engine_path, max_num_batched_tokens=64)
    mixed_batch(engine, [])
    engine.add_request("batched", prompt, params)
    batched = run_to_completion(engine)[("batched", 0)]["tokens"]
    assert batched == alone
    engine = make_engine(tiny_engine_path)
    engine.add_request(
        "other-seed", prompt, SamplingParams(temperature=1.0, seed=99, max_tokens=24)
    )
    assert run_to_completion(engine)[("other-seed", 0)]["tokens"] != alone


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        ([], GREEDY, "prompt is empty"),
        ([1] * 600, GREEDY, "max_model_len"),
        ([1] * 500, SamplingParams(max_tokens=100), "exceeds max_model_len"),
        ([1, 5000], GREEDY, "token ids must be integers in"),
        ([1, -1], GREEDY, "token ids must be integers in"),
        ([1, 2.0], GREEDY, "token ids must be integers in"),
        ([1, True], GREEDY, "token ids must be integers in"),
    ],
)
def test_bad_input_is_rejected_and_the_engine_keeps_serving(
    tiny_engine_path, prompt, params, message
):
    engine = make_engine(tiny_engine_path)
    engine.add_request("good", [5, 6, 7], GREEDY)
    engine.step()
    with pytest.raises(ValueError, match=message):
        engine.add_request("bad", prompt, params)
    results = run_to_completion(engine)
    assert len(results[("good", 0)]["tokens"]) == 23  # first token came in the first step
    assert ("bad", 0) not in results


def test_duplicate_request_id_is_rejected(tiny_engine_path):
    engine = make_engine(tiny_engine_path)
    engine.add_request("x", [5, 6], GREEDY)
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("x", [5, 6], GREEDY)


def test_abort_waiting_and_running_requests(tiny_engine_path):
    engine = make_engine(tiny_engine_path, max_num_seqs=1)
    engine.add_request("running", [5, 6, 7], GREEDY)
    engine.add_request("waiting", [8, 9], GREEDY)
    first = engine.step()
    assert [d.request_id for d in first] == ["running"]
    engine.abort_request(["running", "waiting"])
    stats = engine.stats()
    assert stats.num_free_blocks == stats.num_total_blocks  # freed now, not next step
    deltas = engine.step()
    assert {(d.request_id, d.finish_reason, d.finished) for d in deltas} == {
        ("running", "abort", True),
        ("waiting", "abort", True),
    }
    assert not engine.has_unfinished_requests()
    engine.add_request("running", [5, 6, 7], GREEDY)  # the id is free again


def test_deltas_carry_only_new_tokens_timestamps_and_counts(tiny_engine_path):
    engine = make_engine(tiny_engine_path)
    engine.add_request("a", [5, 6, 7, 8], SamplingParams(temperature=0, max_tokens=3))
    results = run_to_completion(engine)[("a", 0)]
    deltas = results["deltas"]
    assert [len(d.new_token_ids) for d in deltas] == [1, 1, 1]
    assert [d.finished for d in deltas] == [False, False, True]
    assert deltas[-1].finish_reason == "length"
    ts = deltas[-1].timestamps
    assert ts.arrival <= ts.queued <= ts.scheduled <= ts.first_token <= ts.last_token
    assert deltas[0].num_prompt_tokens == 4
    stats = engine.stats()
    assert (stats.prompt_tokens_total, stats.generation_tokens_total) == (4, 3)


def test_n_samples_share_the_prompt_blocks(tiny_engine_path):
    engine = make_engine(tiny_engine_path)
    prompt = random_prompts(1, 40, 40, seed=9)[0]
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=10, ignore_eos=True)
    engine.add_request("multi", prompt, params)
    results = run_to_completion(engine)
    samples = [results[("multi", i)] for i in range(3)]
    assert all(len(s["tokens"]) == 10 for s in samples)
    assert len({tuple(s["tokens"]) for s in samples}) > 1  # different samples
    # Samples 1 and 2 reuse sample 0's two full prompt blocks.
    assert [s["deltas"][0].num_cached_tokens for s in samples] == [0, 32, 32]


def test_logprobs_and_prompt_logprobs(tiny_engine_path):
    engine = make_engine(tiny_engine_path)
    params = SamplingParams(temperature=0, max_tokens=3, logprobs=2, prompt_logprobs=1)
    engine.add_request("lp", [5, 6, 7, 8, 9], params)
    deltas = run_to_completion(engine)[("lp", 0)]["deltas"]
    prompt_lps = deltas[0].prompt_logprobs
    assert prompt_lps[0] is None and [lp.token_id for lp in prompt_lps[1:]] == [6, 7, 8, 9]
    assert all(len(lp.top) == 1 for lp in prompt_lps[1:])
    assert all(d.prompt_logprobs is None for d in deltas[1:])
    for d in deltas:
        (lp,) = d.new_logprobs
        assert lp.token_id == d.new_token_ids[0]
        assert lp.rank == 1 and lp.top[0][0] == lp.token_id  # greedy picks the top token
        assert len(lp.top) == 2 and lp.logprob <= 0


def test_stop_token_ids_end_the_request_with_the_token_as_stop_reason(tiny_engine_path):
    engine = make_engine(tiny_engine_path)
    engine.add_request("free", [5, 6, 7], GREEDY)
    tokens = run_to_completion(engine)[("free", 0)]["tokens"]
    stop_at = tokens[5]
    params = SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[stop_at], ignore_eos=True)
    engine.add_request("stopped", [5, 6, 7], params)
    result = run_to_completion(engine)[("stopped", 0)]
    assert result["tokens"] == tokens[: tokens.index(stop_at) + 1]
    assert result["finish"] == "stop"
    assert result["deltas"][-1].stop_reason == stop_at


def test_prompt_logprobs_are_the_same_with_chunked_prefill(tiny_engine_path):
    prompt = random_prompts(1, 40, 40, seed=12)[0]
    params = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2)
    results = []
    for budget in (512, 16):  # one chunk, then three chunks
        engine = make_engine(tiny_engine_path, max_num_batched_tokens=budget)
        engine.add_request("p", prompt, params)
        results.append(run_to_completion(engine)[("p", 0)]["deltas"][0].prompt_logprobs)
    whole, chunked = results
    assert len(whole) == len(chunked) == 40
    assert [lp.token_id for lp in chunked[1:]] == prompt[1:]
    for a, b in zip(whole[1:], chunked[1:], strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5)
        assert [t for t, _ in a.top] == [t for t, _ in b.top]
