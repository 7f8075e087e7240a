"""A resumed request (failover, engine/resume.py) continues exactly where the original was.

The API re-submits prompt + delivered tokens with ``resumed_output_tokens`` and the budget
left; the engine must then produce the same next tokens as the undisturbed request: greedy
with every penalty on, seeded sampling, and min_tokens keeping EOS banned as long as it did.
"""

from __future__ import annotations

import dataclasses

import pytest

from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.engine.test_llm_engine import make_engine
from tests.support.engine_runs import random_prompts, run_to_completion

CUT = 9  # tokens the "dead" engine delivered before the resume


def _run(engine: LLMEngine, prompt: list[int], params: SamplingParams, **kwargs) -> list[int]:
    engine.add_request("r", prompt, params, **kwargs)
    return run_to_completion(engine)[("r", 0)]["tokens"]


def _resumed(engine, prompt, params, done: list[int]) -> list[int]:
    """What the API sends after a failover: prompt + delivered tokens, the budget left."""
    left = dataclasses.replace(
        params,
        max_tokens=params.max_tokens - len(done),
        min_tokens=max(0, params.min_tokens - len(done)),
    )
    return _run(engine, prompt + done, left, resumed_output_tokens=len(done))


@pytest.fixture(scope="module")
def engine(tiny_engine_path):
    return make_engine(tiny_engine_path)


@pytest.fixture(scope="module")
def prompt():
    # Short and repetitive, so penalties over the prompt and the output both matter.
    return random_prompts(1, 12, 12, seed=3, vocab=40)[0] * 2


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(
            temperature=0.0,
            max_tokens=30,
            ignore_eos=True,
            repetition_penalty=1.8,
            frequency_penalty=1.5,
            presence_penalty=1.0,
        ),
        SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=30, ignore_eos=True),
        SamplingParams(temperature=0.9, seed=7, max_tokens=30, frequency_penalty=0.8),
    ],
    ids=["greedy-penalties", "seeded-top-p", "seeded-penalties"],
)
def test_resumed_request_continues_token_for_token(engine, prompt, params):
    whole = _run(engine, prompt, params)
    assert len(whole) > CUT
    rest = _resumed(engine, prompt, params, whole[:CUT])
    assert whole[:CUT] + rest == whole


def test_penalties_count_resumed_tokens_as_output(engine, prompt):
    """Without resumed_output_tokens (the delivered tokens seen as prompt), frequency and
    presence penalties lose the output so far and the continuation differs: the field matters."""
    params = SamplingParams(
        temperature=0.0, max_tokens=30, ignore_eos=True, frequency_penalty=2.0, presence_penalty=2.0
    )
    whole = _run(engine, prompt, params)
    left = dataclasses.replace(params, max_tokens=params.max_tokens - CUT)
    as_prompt = _run(engine, prompt + whole[:CUT], left)
    assert whole[:CUT] + as_prompt != whole
    assert whole[:CUT] + _resumed(engine, prompt, params, whole[:CUT]) == whole


def test_min_tokens_counts_resumed_tokens(engine, prompt):
    """min_tokens bans EOS until the whole output, the resumed part included, is long enough."""
    eos = sorted(engine.model_config.eos_token_ids)
    # EOS as a stop token is banned while output < min_tokens: with min_tokens = 20 and 9
    # already delivered, 11 more must come before the request can stop.
    params = SamplingParams(
        temperature=0.0, max_tokens=40, min_tokens=20, stop_token_ids=eos or [5]
    )
    whole = _run(engine, prompt, params)
    assert len(whole) >= 20
    rest = _resumed(engine, prompt, params, whole[:CUT])
    assert whole[:CUT] + rest == whole


def test_resumed_tokens_must_leave_a_prompt(engine):
    with pytest.raises(ValueError, match="resumed_output_tokens"):
        engine.add_request("bad", [5, 6, 7], SamplingParams(max_tokens=4), resumed_output_tokens=3)
    assert not engine.has_unfinished_requests()
