"""Structured-output specs, each with a check of the text it allows, and an engine runner."""

from __future__ import annotations

import json
import re

import jsonschema

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.protocol import StructuredOutput
from tests.support.engine_runs import run_to_completion

# Small bounded schema: random weights finish it well within max_tokens.
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "member"],
    "additionalProperties": False,
}
EMAIL_REGEX = r"[a-z]{3,8}@[a-z]{2,6}\.(com|org)"
COLORS = ["red", "green", "blue", "dark purple"]
LARK_GRAMMAR = r"""
start: "(" expr ")"
expr: NUMBER (OP NUMBER){0,3}
OP: "+" | "-" | "*"
NUMBER: /[1-9][0-9]?/
"""
GBNF_GRAMMAR = r"""
root ::= "The answer is " digit digit? "."
digit ::= [0-9]
"""


def _json_matches_schema(text: str) -> None:
    jsonschema.validate(json.loads(text), PERSON_SCHEMA)


def _any_json_object(text: str) -> None:
    assert isinstance(json.loads(text), dict)


def _matches(pattern: str):
    def check(text: str) -> None:
        assert re.fullmatch(pattern, text), text

    return check


def _one_of_colors(text: str) -> None:
    assert text in COLORS, text


# kind -> (spec, a check that raises unless the text follows it)
SPECS = {
    "json": (StructuredOutput(kind="json", spec=json.dumps(PERSON_SCHEMA)), _json_matches_schema),
    "json_object": (StructuredOutput(kind="json_object"), _any_json_object),
    "regex": (StructuredOutput(kind="regex", spec=EMAIL_REGEX), _matches(EMAIL_REGEX)),
    "choice": (StructuredOutput(kind="choice", spec=json.dumps(COLORS)), _one_of_colors),
    "lark": (
        StructuredOutput(kind="grammar", spec=LARK_GRAMMAR),
        _matches(r"\([1-9][0-9]?([-+*][1-9][0-9]?){0,3}\)"),
    ),
    "gbnf": (
        StructuredOutput(kind="grammar", spec=GBNF_GRAMMAR),
        _matches(r"The answer is [0-9][0-9]?\."),
    ),
}


def make_engine(path, **overrides) -> LLMEngine:
    overrides.setdefault("num_gpu_blocks", 256)
    overrides.setdefault("max_model_len", 512)
    return LLMEngine(EngineConfig(model=str(path), device="cpu", **overrides))


def run(engine: LLMEngine, requests: dict[str, tuple[list[int], object]]) -> dict:
    """Add every (prompt, params) by id, step to the end; per (id, index) the results."""
    for request_id, (prompt, params) in requests.items():
        engine.add_request(request_id, prompt, params)
    return run_to_completion(engine)
