"""Grammar enforcement in the engine, with random weights: what a constrained request returns
follows its spec, however unlikely the model finds it."""

from __future__ import annotations

import json

import pytest

from engine.protocol import StructuredOutput
from engine.sampling_params import SamplingParams
from tests.support.engine_runs import random_prompts
from tests.support.structured_specs import PERSON_SCHEMA, SPECS, make_engine, run

PROMPTS = random_prompts(3, 5, 40, seed=3)


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("kind", [k for k in SPECS if k != "json_object"])
def test_every_kind_of_spec_is_followed(engine, tokenizer, kind, temperature):
    structured, check = SPECS[kind]
    params = SamplingParams(temperature=temperature, max_tokens=200, seed=7, structured=structured)
    results = run(engine, {f"{kind}-{i}": (p, params) for i, p in enumerate(PROMPTS)})
    texts = set()
    for i in range(len(PROMPTS)):
        result = results[(f"{kind}-{i}", 0)]
        text = tokenizer.decode(result["tokens"])
        check(text)
        # The grammar ended the output: no length cut, no tokens after the last one it allows.
        assert result["finish"] == "stop", text
        texts.add(text)
    if kind != "choice" and temperature > 0:
        assert len(texts) > 1  # the model still chooses within the grammar


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_json_object_outputs_are_objects(engine, tokenizer, temperature):
    """Any JSON object: random weights may wander inside a string past max_tokens (then the
    output ends with "length", as OpenAI's does); every output that ends is an object."""
    structured, check = SPECS["json_object"]
    prompts = random_prompts(8, 5, 40, seed=3)
    results = run(
        engine,
        {
            f"obj-{i}": (
                p,
                SamplingParams(
                    temperature=temperature, max_tokens=150, seed=i, structured=structured
                ),
            )
            for i, p in enumerate(prompts)
        },
    )
    finished = 0
    for i in range(len(prompts)):
        result = results[(f"obj-{i}", 0)]
        text = tokenizer.decode(result["tokens"])
        assert text.startswith("{")
        if result["finish"] == "stop":
            check(text)
            finished += 1
        else:
            assert (result["finish"], len(result["tokens"])) == ("length", 150)
    if temperature > 0:  # greedy may loop inside a string for every prompt
        assert finished >= 2


def test_each_of_n_samples_follows_its_own_grammar(engine, tokenizer):
    structured, check = SPECS["regex"]
    params = SamplingParams(n=4, temperature=1.0, max_tokens=60, seed=3, structured=structured)
    results = run(engine, {"n4": (PROMPTS[0], params)})
    texts = [tokenizer.decode(results[("n4", i)]["tokens"]) for i in range(4)]
    for text in texts:
        check(text)
    assert len(set(texts)) == 4
    assert all(results[("n4", i)]["finish"] == "stop" for i in range(4))


def test_unconstrained_neighbours_are_untouched(engine, tokenizer):
    free = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    prompts = random_prompts(4, 10, 60, seed=21)
    alone = run(engine, {f"free-{i}": (p, free) for i, p in enumerate(prompts)})
    mixed = {f"free-{i}": (p, free) for i, p in enumerate(prompts)}
    bounded = {k: v for k, v in SPECS.items() if k != "json_object"}
    for i, (kind, (structured, _)) in enumerate(bounded.items()):
        constrained = SamplingParams(temperature=0.0, max_tokens=100, structured=structured)
        mixed[f"bound-{kind}"] = (prompts[i % len(prompts)], constrained)
    together = run(engine, mixed)
    for i in range(len(prompts)):
        assert together[(f"free-{i}", 0)]["tokens"] == alone[(f"free-{i}", 0)]["tokens"]
    for kind, (_, check) in bounded.items():
        check(tokenizer.decode(together[(f"bound-{kind}", 0)]["tokens"]))


def test_max_tokens_before_the_grammar_completes_ends_with_length(engine, tokenizer):
    structured, _ = SPECS["json"]
    params = SamplingParams(temperature=0.0, max_tokens=4, structured=structured)
    result = run(engine, {"short": (PROMPTS[0], params)})[("short", 0)]
    assert result["finish"] == "length"
    assert len(result["tokens"]) == 4
    assert tokenizer.decode(result["tokens"]).startswith('{"')


def test_grammar_state_survives_preemption(tiny_engine_path, tokenizer):
    # 10 JSON arrays of 10 numbers: long outputs that outgrow a 24-block KV cache together.
    schema = {
        "type": "array",
        "items": {"type": "integer", "minimum": 10, "maximum": 99},
        "minItems": 10,
        "maxItems": 10,
    }
    structured = StructuredOutput(kind="json", spec=json.dumps(schema))
    params = SamplingParams(temperature=0.0, max_tokens=120, structured=structured)
    prompts = random_prompts(10, 20, 30, seed=9)
    requests = {f"r{i}": (p, params) for i, p in enumerate(prompts)}
    roomy = run(make_engine(tiny_engine_path), requests)
    tight_engine = make_engine(tiny_engine_path, num_gpu_blocks=24, max_model_len=256)
    tight = run(tight_engine, requests)
    assert tight_engine.stats().num_preemptions > 0
    for i in range(len(prompts)):
        tokens = tight[(f"r{i}", 0)]["tokens"]
        numbers = json.loads(tokenizer.decode(tokens))
        assert len(numbers) == 10 and all(10 <= x <= 99 for x in numbers)
        assert tokens == roomy[(f"r{i}", 0)]["tokens"]  # recomputed, not restarted


def test_a_spec_that_does_not_compile_fails_only_its_request(engine, tokenizer):
    bad = StructuredOutput(kind="json", spec='{"type": "no-such-type"}')
    structured, check = SPECS["choice"]
    results = run(
        engine,
        {
            "bad": (PROMPTS[0], SamplingParams(n=2, temperature=0.0, structured=bad)),
            "good": (PROMPTS[1], SamplingParams(temperature=0.0, structured=structured)),
        },
    )
    for index in (0, 1):
        failed = results[("bad", index)]
        assert failed["finish"] == "abort" and failed["tokens"] == []
        assert "no-such-type" in failed["deltas"][-1].error
    check(tokenizer.decode(results[("good", 0)]["tokens"]))
    # The engine goes on serving constrained requests.
    again = run(engine, {"again": (PROMPTS[2], SamplingParams(structured=structured))})
    check(tokenizer.decode(again[("again", 0)]["tokens"]))


def test_a_failed_spec_with_n_samples_ends_every_sample_on_an_idle_engine(engine):
    """The first sample is dropped while its siblings wait for its prompt's KV: with nothing
    else running they must still be released and end, not wait for ever."""
    bad = StructuredOutput(kind="regex", spec="(unclosed")
    results = run(engine, {"lonely": (PROMPTS[0], SamplingParams(n=3, structured=bad))})
    assert sorted(index for _id, index in results) == [0, 1, 2]
    for result in results.values():
        assert result["finish"] == "abort" and result["tokens"] == []
        assert result["deltas"][-1].error


def test_the_same_spec_compiles_once(engine):
    structured = StructuredOutput(kind="json", spec=json.dumps(PERSON_SCHEMA))
    compiler = engine.structured.compiler
    first = compiler.submit(structured)
    same = compiler.submit(StructuredOutput(kind="json", spec=json.dumps(PERSON_SCHEMA)))
    assert same is first
    assert compiler.submit(StructuredOutput(kind="regex", spec="x+")) is not first


def test_masks_filled_in_parallel_give_the_same_outputs(tiny_engine_path, tokenizer):
    # Many-core machines fill large batches' masks on llguidance's thread pool; force it here.
    structured, check = SPECS["json"]
    params = SamplingParams(temperature=0.0, max_tokens=100, structured=structured)
    requests = {f"p{i}": (p, params) for i, p in enumerate(random_prompts(6, 5, 30, seed=4))}
    sequential = run(make_engine(tiny_engine_path), requests)
    parallel_engine = make_engine(tiny_engine_path)
    parallel_engine.runner.grammar_bitmask.parallel_fill_rows = 2
    parallel = run(parallel_engine, requests)
    for key, result in parallel.items():
        check(tokenizer.decode(result["tokens"]))
        assert result["tokens"] == sequential[key]["tokens"]


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_a_resumed_request_continues_its_grammar(engine, tokenizer, temperature):
    """After a failover the API re-submits prompt + delivered tokens (engine/resume.py): the
    grammar must first consume those tokens, or it would restart mid-output and the rest
    would not continue the same JSON."""
    structured, check = SPECS["json"]
    params = SamplingParams(temperature=temperature, max_tokens=200, seed=11, structured=structured)
    prompt = PROMPTS[0]
    whole = run(engine, {"whole": (prompt, params)})[("whole", 0)]["tokens"]
    cut = len(whole) // 2
    assert cut >= 2
    left = SamplingParams(
        temperature=temperature, max_tokens=200 - cut, seed=11, structured=structured
    )
    engine.add_request("resumed", prompt + whole[:cut], left, resumed_output_tokens=cut)
    results = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            results.setdefault(out.request_id, []).extend(out.new_token_ids)
    rest = results["resumed"]
    assert whole[:cut] + rest == whole
    check(tokenizer.decode(whole[:cut] + rest))


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_a_grammar_and_allowed_tokens_that_part_ways_end_with_the_clients_error(
    engine, tokenizer, temperature
):
    # The grammar wants "aab"; only "a" is allowed: they agree on the first token, then leave
    # no token at all. The request ends there with an error the API answers as a 400, what
    # it generated delivered; before, a 500 carried the grammar's refusal of whatever was drawn.
    a = tokenizer.encode("a", add_special_tokens=False)
    assert len(a) == 1
    params = SamplingParams(
        temperature=temperature,
        seed=1,
        max_tokens=10,
        allowed_token_ids=a,
        structured=StructuredOutput(kind="regex", spec="aab"),
    )
    result = run(engine, {"parting": (PROMPTS[0], params)})[("parting", 0)]
    tokens = result["tokens"]
    assert tokens and set(tokens) == set(a)
    last = result["deltas"][-1]
    assert last.error_code == "no_token_allowed"
    assert f"output position {len(tokens)}: allowed_token_ids and the grammar" in last.error
