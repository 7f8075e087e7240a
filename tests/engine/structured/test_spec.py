"""engine.structured.spec: the check the API runs before a request reaches an engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.protocol import StructuredOutput
from engine.structured.spec import StructuredOutputError, spec_key, validate
from tests.support.structured_specs import SPECS


@pytest.mark.parametrize("kind", list(SPECS))
def test_valid_specs_pass(kind):
    validate(SPECS[kind][0])


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("json", "{not json", "the JSON schema is not valid JSON"),
        ("json", "[1, 2]", "must be a JSON object"),
        ("json", '{"type": "strin"}', "invalid JSON schema: Invalid type: strin"),
        ("json", '{"type": "integer", "minimum": 5, "maximum": 1}', "invalid JSON schema"),
        ("regex", "[a-z", "unclosed character class"),
        ("regex", "", "the regex is empty"),
        ("choice", "[]", "non-empty list of non-empty strings"),
        ("choice", '["a", 1]', "non-empty list of non-empty strings"),
        ("choice", "a, b", "the choice list is not valid JSON"),
        ("grammar", "start: missing_rule", 'unknown name: "missing_rule"'),
        ("grammar", 'root ::= "a" [0-9', "GBNF"),
        ("grammar", "  ", "the grammar is empty"),
        ("yaml", "a: 1", "unknown structured output kind 'yaml'"),
    ],
)
def test_invalid_specs_say_why_in_one_line(kind, spec, message):
    with pytest.raises(StructuredOutputError) as caught:
        validate(StructuredOutput(kind=kind, spec=spec))
    text = str(caught.value)
    assert message in text
    assert "\n" not in text and len(text) <= 400


def test_equal_specs_share_a_cache_key():
    a = StructuredOutput(kind="regex", spec="a+")
    assert spec_key(a) == spec_key(StructuredOutput(kind="regex", spec="a+"))
    assert spec_key(a) != spec_key(StructuredOutput(kind="grammar", spec="a+"))


def test_the_spec_check_loads_no_torch():
    code = (
        "import sys, engine.structured.spec as s; from engine.protocol import StructuredOutput;"
        "s.validate(StructuredOutput(kind='json_object'));"
        "print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    ).stdout
    assert out.strip() == "[]"
