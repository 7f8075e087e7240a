"""Steps inside the step in flight (engine/core/step_preemption.py) on a real tiny llama: a
returning tenant's request gets its first token while a flood's prompt step is paused between
layers, and neither its tokens nor the flood's change."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.engine_runs import random_prompts, run_to_completion

FLOOD = random_prompts(6, 300, 400, seed=3)
SHORT = random_prompts(1, 12, 12, seed=4)[0]
PARAMS = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def make_engine(path, **overrides) -> LLMEngine:
    config = dict(
        num_gpu_blocks=512,
        max_model_len=512,
        max_num_seqs=4,
        scheduling_policy="fair",
        device="cpu",
        dtype="float32",
    )
    return LLMEngine(EngineConfig(model=str(path), **(config | overrides)))


def add_flood(engine: LLMEngine) -> None:
    for i, prompt in enumerate(FLOOD):
        engine.add_request(f"a-{i}", prompt, PARAMS, tenant="A")


def tokens(results) -> dict[str, list[int]]:
    return {rid: entry["tokens"] for (rid, _), entry in results.items()}


@pytest.fixture(scope="module")
def alone(tiny_llama):
    """Each tenant's greedy tokens without the other."""
    engine = make_engine(tiny_llama)
    add_flood(engine)
    flood = tokens(run_to_completion(engine))
    engine.add_request("b", SHORT, PARAMS, tenant="B")
    return flood, tokens(run_to_completion(engine))["b"]


def test_a_returning_tenant_runs_inside_the_flood_step_with_unchanged_tokens(tiny_llama, alone):
    engine = make_engine(tiny_llama)
    add_flood(engine)
    inside: list = []  # (checkpoint number, deltas of the nested step)
    calls = []

    def hook():
        calls.append(1)
        if len(calls) == 2:  # the first step (the flood's prompts) is paused mid-way
            engine.add_request("b", SHORT, PARAMS, tenant="B")
            inside.append(engine.step_inside(["b"]))

    assert engine.enable_step_preemption(hook)
    results = tokens(run_to_completion(engine))
    [deltas] = inside
    assert [d.request_id for d in deltas] == ["b"]
    assert len(deltas[0].new_token_ids) == 1  # its first token, before the paused step ended
    assert engine.scheduler.num_steps_inside == 1
    flood_alone, b_alone = alone
    assert [deltas[0].new_token_ids[0]] + results["b"] == b_alone
    assert {rid: t for rid, t in results.items() if rid != "b"} == flood_alone


def test_the_flood_tenants_own_new_request_waits_for_the_step(tiny_llama):
    engine = make_engine(tiny_llama)
    add_flood(engine)
    inside = []

    def hook():
        if not inside:
            engine.add_request("a-late", SHORT, PARAMS, tenant="A")
            inside.append(engine.step_inside(["a-late"]))

    engine.enable_step_preemption(hook)
    results = tokens(run_to_completion(engine))
    assert inside == [[]]  # its tenant is the one in the step: it ranks no higher
    assert len(results["a-late"]) == PARAMS.max_tokens  # and it ran later as usual


def test_only_the_fair_policy_on_a_cpu_takes_the_hook(tiny_llama):
    assert not make_engine(tiny_llama, scheduling_policy="fcfs").enable_step_preemption(print)
    assert not make_engine(tiny_llama, step_preemption=False).enable_step_preemption(print)


def test_a_request_of_two_samples_runs_its_first_inside_and_the_second_after(tiny_llama):
    engine = make_engine(tiny_llama)
    add_flood(engine)
    inside = []
    params = SamplingParams(temperature=0.0, max_tokens=4, n=2, ignore_eos=True)

    def hook():
        if not inside:
            engine.add_request("b2", SHORT, params, tenant="B")
            inside.append(engine.step_inside(["b2"]))

    engine.enable_step_preemption(hook)
    results = run_to_completion(engine)
    # Sample 1 waits, held, for sample 0 to have the prompt cached: only sample 0 ran inside.
    assert [(d.request_id, d.index) for d in inside[0]] == [("b2", 0)]
    first = inside[0][0].new_token_ids
    assert first + results[("b2", 0)]["tokens"] == results[("b2", 1)]["tokens"]  # greedy twins
    assert len(results[("b2", 1)]["tokens"]) == 4
    assert len(engine.scheduler.waiting) == 0 and not engine.has_unfinished_requests()


def test_a_step_of_one_prompt_pauses_four_times_in_each_layer(tiny_llama):
    """A step of one long prompt has no second prompt to pause between, and the tiny llama
    has two layers: with pauses only between layers, a newcomer waited for half of the step
    (25-80 ms under a flood through the API on the 2-core VM, 2026-11-26); with one more
    between each layer's attention and MLP, still 25-60 ms once a flood's arriving requests
    had slowed a step from 8 ms to 100-200 ms."""
    engine = make_engine(tiny_llama)
    engine.add_request("a", FLOOD[0], PARAMS, tenant="A")
    calls = []
    engine.enable_step_preemption(lambda: calls.append(1))
    engine.step()  # the prompt, in one step
    layers = len(engine.runner.model.layers)
    # Before the layer, after its QKV projection, after its attention, inside its MLP.
    assert layers == 2 and len(calls) == 4 * layers
