"""Speculative decoding through LLMEngine on the tiny random llama: the same tokens as without
it (greedy, and seeded sampling), with prefix caching, chunked verification, preemption, a LoRA
adapter, structured outputs, n > 1 and stops; tenant scoping of the suffix cache; backoff;
KV blocks of rejected drafts given back."""

from __future__ import annotations

import re

import pytest

from engine.config import EngineConfig
from engine.layers.quantized_linear import KERNEL_MAX_ROWS
from engine.llm_engine import LLMEngine
from engine.protocol import StructuredOutput
from engine.sampling_params import SamplingParams
from engine.tooling.random_lora import make_random_adapter
from tests.support.engine_runs import random_prompts, run_to_completion

GREEDY = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)


def make_engine(path, spec: bool, **overrides) -> LLMEngine:
    overrides.setdefault("num_gpu_blocks", 256)
    overrides.setdefault("max_model_len", 512)
    config = EngineConfig(model=str(path), enable_speculative_decoding=spec, **overrides)
    return LLMEngine(config)


def run(engine: LLMEngine, requests: dict) -> dict:
    """requests: id -> (prompt, params[, add_request kwargs]); returns (id, index) -> tokens."""
    for rid, (prompt, params, *kwargs) in requests.items():
        engine.add_request(rid, prompt, params, **(kwargs[0] if kwargs else {}))
    return {key: r["tokens"] for key, r in run_to_completion(engine).items()}


def both(path, requests: dict, **overrides) -> tuple[dict, dict, LLMEngine]:
    plain = run(make_engine(path, False, **overrides), requests)
    engine = make_engine(path, True, **overrides)
    return plain, run(engine, requests), engine


def prompts(count: int = 4, seed: int = 5) -> list[list[int]]:
    """Random prompts and one that repeats itself (lookup has something to find)."""
    return [*random_prompts(count - 1, 20, 90, seed=seed), list(range(40, 70)) * 3]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"enable_prefix_caching": False},
        {"max_num_batched_tokens": 20},  # drafts cut to the budget left by other requests
        {"num_gpu_blocks": 16, "max_model_len": 256, "max_num_batched_tokens": 64},
    ],
    ids=["prefix-caching", "no-prefix-caching", "chunked-verification", "kv-pressure"],
)
def test_greedy_output_is_token_identical_with_and_without_speculation(tiny_engine_path, overrides):
    ps = prompts()
    requests = {f"r{i}": (p, GREEDY) for i, p in enumerate(ps)}
    requests["again"] = (ps[0], GREEDY)  # the same prompt again: prefix cache hits
    plain, speculative, engine = both(tiny_engine_path, requests, **overrides)
    assert speculative == plain
    stats = engine.stats()
    assert stats.spec_decode_num_accepted_tokens > 0
    assert stats.generation_tokens_total == sum(len(t) for t in plain.values())
    if "num_gpu_blocks" in overrides:
        assert stats.num_preemptions > 0  # recomputed requests speculate on correctly too
    kv = engine.scheduler.kv_cache
    assert kv.num_free_blocks == kv.num_total_blocks  # every block came back


def test_rejected_drafts_give_their_kv_blocks_back_every_step(tiny_engine_path):
    engine = make_engine(tiny_engine_path, True, block_size=4)
    for i, p in enumerate(prompts()):
        engine.add_request(f"r{i}", p, GREEDY)
    kv = engine.scheduler.kv_cache
    rejected = 0
    while engine.has_unfinished_requests():
        before = engine.scheduler.speculator.num_draft_tokens
        before -= engine.scheduler.speculator.num_accepted_tokens
        engine.step()
        spec = engine.scheduler.speculator
        rejected += spec.num_draft_tokens - spec.num_accepted_tokens - before
        for r in engine.scheduler.running:
            # Exactly the blocks of the tokens whose KV is kept: none for rejected drafts.
            assert len(kv.get_block_ids(r.request_id)) == -(-r.num_computed_tokens // 4)
    assert rejected > 0
    assert kv.num_free_blocks == kv.num_total_blocks


def test_seeded_sampling_gives_the_same_tokens_with_and_without_speculation(tiny_engine_path):
    params = [
        SamplingParams(temperature=0.05, max_tokens=40, ignore_eos=True, seed=3),
        SamplingParams(
            temperature=0.3,
            top_p=0.9,
            top_k=20,
            repetition_penalty=1.05,
            max_tokens=40,
            ignore_eos=True,
            seed=4,
            logprobs=2,
        ),
        SamplingParams(n=3, temperature=0.1, max_tokens=40, ignore_eos=True, seed=5),
    ]
    ps = prompts(3, seed=9)
    requests = {f"s{i}": (ps[-1 - i], p) for i, p in enumerate(params)}
    plain, speculative, engine = both(tiny_engine_path, requests)
    assert speculative == plain
    assert engine.stats().spec_decode_num_accepted_tokens > 0


def test_with_a_lora_adapter_and_n_samples(tiny_engine_path, tmp_path):
    adapter_path = str(make_random_adapter(tiny_engine_path, tmp_path / "a"))
    results = []
    for spec in (False, True):
        engine = make_engine(tiny_engine_path, spec, max_lora_rank=8)
        adapter = engine.load_adapter("a", adapter_path)
        ps = prompts()
        requests = {
            "lora": (ps[-1], GREEDY, {"adapter": adapter}),
            "lora-2": (ps[0], GREEDY, {"adapter": adapter}),
            "base": (ps[-1], GREEDY),
            "n": (ps[1], SamplingParams(n=3, temperature=0.0, max_tokens=40, ignore_eos=True)),
        }
        results.append(run(engine, requests))
    plain, speculative = results
    assert speculative == plain
    assert plain[("lora", 0)] != plain[("base", 0)]  # the adapter changes the output
    assert plain[("n", 0)] == plain[("n", 1)] == plain[("n", 2)]
    assert engine.stats().spec_decode_num_accepted_tokens > 0


def test_structured_outputs_propose_only_what_the_grammar_allows(tiny_engine_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_engine_path)
    pattern = "[ab ]{30,60}"
    structured = StructuredOutput(kind="regex", spec=pattern)
    params = SamplingParams(temperature=0.0, max_tokens=80, structured=structured)
    sampled = SamplingParams(temperature=0.2, max_tokens=80, seed=1, structured=structured)
    requests = {
        "g": (prompts()[-1], params),
        "s": (prompts()[0], sampled),
        "free": (prompts()[1], GREEDY),
    }
    plain, speculative, engine = both(tiny_engine_path, requests)
    assert speculative == plain
    for key in (("g", 0), ("s", 0)):
        assert re.fullmatch(pattern, tokenizer.decode(speculative[key])), key
    assert engine.stats().spec_decode_num_accepted_tokens > 0


def test_stop_tokens_and_max_tokens_end_where_they_would_without_speculation(tiny_engine_path):
    p = prompts()[-1]
    free = run(make_engine(tiny_engine_path, False), {"x": (p, GREEDY)})[("x", 0)]
    stop = free[len(free) // 2]  # a token from the middle of the output
    requests = {
        "stop": (p, SamplingParams(temperature=0.0, max_tokens=48, stop_token_ids=[stop])),
        "short": (p, SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True)),
        "min": (
            p,
            SamplingParams(temperature=0.0, max_tokens=48, stop_token_ids=[stop], min_tokens=30),
        ),
    }
    plain, speculative, _ = both(tiny_engine_path, requests)
    assert speculative == plain
    assert speculative[("stop", 0)][-1] == stop and len(speculative[("short", 0)]) == 7


def test_stop_strings_through_the_offline_llm(tiny_engine_path):
    from engine import LLM

    p = {"prompt_token_ids": prompts()[-1]}
    texts = []
    for spec in (False, True):
        llm = LLM(
            tiny_engine_path, num_gpu_blocks=128, max_model_len=512,
            enable_speculative_decoding=spec,
        )  # fmt: skip
        free = llm.generate([p], GREEDY)[0].outputs[0].text
        stop = free[len(free) // 2 : len(free) // 2 + 3]
        params = SamplingParams(temperature=0.0, max_tokens=48, stop=[stop], ignore_eos=True)
        texts.append((stop, llm.generate([p], params)[0].outputs[0]))
    (stop_a, plain), (stop_b, speculative) = texts
    assert stop_a == stop_b and speculative.text == plain.text
    assert speculative.finish_reason == plain.finish_reason == "stop"


def _acceptance(engine: LLMEngine, rid: str, prompt: list[int], salt: str) -> tuple[list, int]:
    engine.add_request(rid, prompt, GREEDY, cache_salt=salt)
    result = run_to_completion(engine)[(rid, 0)]
    return result["tokens"], result["deltas"][-1].num_accepted_tokens


def test_a_tenant_gains_from_its_own_outputs_and_never_from_anothers(tiny_engine_path):
    prompt = random_prompts(1, 40, 40, seed=21)[0]
    cold_tokens, cold = _acceptance(make_engine(tiny_engine_path, True), "cold", prompt, "b")

    engine = make_engine(tiny_engine_path, True)
    first, first_accepted = _acceptance(engine, "a1", prompt, "tenant-a")
    assert first_accepted == cold  # nothing cached yet: as cold as a fresh engine
    # Tenant B asks for what only tenant A's output holds: no gain, exactly a cold cache's.
    tokens_b, accepted_b = _acceptance(engine, "b1", prompt, "tenant-b")
    assert accepted_b == cold
    # Tenant A's repeat is proposed its own earlier output.
    tokens_a, accepted_a = _acceptance(engine, "a2", prompt, "tenant-a")
    assert accepted_a > cold + 10
    assert first == tokens_a == tokens_b == cold_tokens


def test_backs_off_in_large_batches_and_when_a_request_opts_out(tiny_engine_path):
    ps = prompts(6)
    requests = {f"r{i}": (p, GREEDY) for i, p in enumerate(ps)}
    plain, speculative, engine = both(tiny_engine_path, requests, speculative_max_num_seqs=2)
    assert speculative == plain
    # Six sequences run together until the shortest ones end: drafts only come once at most
    # two are left, so far fewer steps verify drafts than when the limit allows all six.
    loaded = engine.stats().spec_decode_num_drafts
    roomy = make_engine(tiny_engine_path, True)
    run(roomy, requests)
    assert loaded < roomy.stats().spec_decode_num_drafts

    off = SamplingParams(
        temperature=0.0, max_tokens=48, ignore_eos=True, speculative_decoding=False
    )
    engine = make_engine(tiny_engine_path, True)
    engine.add_request("off", ps[-1], off)
    deltas = run_to_completion(engine)[("off", 0)]["deltas"]
    assert deltas[-1].num_draft_tokens == 0 and engine.stats().spec_decode_num_drafts == 0


def test_deltas_report_each_samples_drafts_and_acceptance(tiny_engine_path):
    engine = make_engine(tiny_engine_path, True)
    ps = prompts()
    for i, p in enumerate(ps):
        engine.add_request(f"r{i}", p, GREEDY)
    finals = [r["deltas"][-1] for r in run_to_completion(engine).values()]
    stats = engine.stats()
    assert sum(d.num_draft_tokens for d in finals) == stats.spec_decode_num_draft_tokens
    assert sum(d.num_accepted_tokens for d in finals) == stats.spec_decode_num_accepted_tokens
    assert all(d.num_accepted_tokens <= d.num_draft_tokens for d in finals)
    message = finals[-1].to_message()
    assert (message.num_draft_tokens, message.num_accepted_tokens) == (
        finals[-1].num_draft_tokens,
        finals[-1].num_accepted_tokens,
    )


@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
def test_greedy_output_is_token_identical_with_quantized_weights(tiny_engine_path, quantization):
    """Verified rows are decode rows (engine/worker/step_inputs.py) on kernels whose rows do
    not depend on each other, so float and quantized weights alike give exactly the tokens
    of one-row decoding; prompts that repeat themselves get drafts verified and accepted.
    (What the random model writes after them, and so which drafts lookup finds and which are
    accepted, depends on the CPU's kernels: on an AVX2-only CPU one of these prompts got no
    draft at all, so drafts and acceptance are asked of the three together.)"""
    repeating = [list(range(40, 70)) * 3, [*range(100, 125)] * 4, [7, 8, 9, 10, 11] * 12]
    requests = {f"r{i}": (p, GREEDY) for i, p in enumerate(repeating)}
    drafted, accepted = {}, {}
    for rid, request in requests.items():  # concurrency 1, as a single stream runs
        plain, speculative, engine = both(
            tiny_engine_path, {rid: request}, quantization=quantization
        )
        assert speculative == plain, rid
        drafted[rid] = engine.stats().spec_decode_num_draft_tokens
        accepted[rid] = engine.stats().spec_decode_num_accepted_tokens
    assert sum(drafted.values()) > 0, drafted
    assert sum(accepted.values()) > 0, accepted
    plain, speculative, _ = both(tiny_engine_path, requests, quantization=quantization)
    assert speculative == plain  # and side by side


def test_drafts_are_capped_to_the_rows_the_exact_kernels_take(tiny_engine_path):
    engine = make_engine(tiny_engine_path, True, num_speculative_tokens=12)
    assert engine.scheduler.speculator.num_speculative_tokens == KERNEL_MAX_ROWS - 1
