"""The offline ``LLM``: ``SamplingParams(structured=...)`` constrains the text it returns."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine import LLM, SamplingParams
from engine.protocol import StructuredOutput
from engine.structured.spec import StructuredOutputError
from tests.support.structured_specs import PERSON_SCHEMA


@pytest.fixture(scope="module")
def llm(tiny_engine_path):
    return LLM(tiny_engine_path, device="cpu", num_gpu_blocks=128, max_model_len=512)


def test_generate_returns_json_that_follows_the_schema(llm):
    structured = StructuredOutput(kind="json", spec=json.dumps(PERSON_SCHEMA))
    outputs = llm.generate(
        ["Alice is", "Describe Bob:"],
        SamplingParams(temperature=1.0, seed=0, max_tokens=200, structured=structured),
    )
    for output in outputs:
        completion = output.outputs[0]
        jsonschema.validate(json.loads(completion.text), PERSON_SCHEMA)
        assert completion.finish_reason == "stop"


def test_a_bad_spec_is_refused_before_anything_runs(llm):
    bad = StructuredOutput(kind="choice", spec="[]")
    with pytest.raises(StructuredOutputError, match="non-empty list"):
        llm.generate(["hi"], SamplingParams(structured=bad))
    assert not llm.llm_engine.has_unfinished_requests()
