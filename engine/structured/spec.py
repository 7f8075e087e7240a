"""Turn a StructuredOutput into an llguidance grammar, or say in one line why it cannot be.

Torch-free: API processes call ``validate`` to answer 400 before a request reaches an engine;
the engine's compiler calls ``to_grammar`` and compiles the result against the tokenizer.
"""

from __future__ import annotations

import hashlib
import json

import llguidance

from engine.protocol import StructuredOutput

KINDS = ("json", "json_object", "regex", "choice", "grammar")
# Longest error text handed back to a client: llguidance can quote a whole grammar.
_MAX_ERROR_CHARS = 300
# JSON is generated without free whitespace: a model (random weights above all) could otherwise
# spend every token on spaces and newlines. The separators match json.dumps, which models know.
# A schema's own "x-guidance" options still override these.
_JSON_DEFAULTS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class StructuredOutputError(ValueError):
    """The spec cannot constrain generation; the message says why, briefly."""


def spec_key(structured: StructuredOutput) -> str:
    """Cache key of a spec: equal specs compile to the same grammar."""
    digest = hashlib.sha256(structured.kind.encode())
    digest.update(b"\0")
    digest.update(structured.spec.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def to_grammar(structured: StructuredOutput) -> str:
    """The llguidance grammar (JSON text) of ``structured``; raises StructuredOutputError for
    what is malformed before compiling (not JSON, an unknown kind, an empty choice list)."""
    kind, spec = structured.kind, structured.spec
    if kind == "json":
        schema = _json_value(spec, "the JSON schema")
        if not isinstance(schema, dict):
            raise StructuredOutputError("the JSON schema must be a JSON object")
        return _from_json_schema(schema)
    if kind == "json_object":
        return _from_json_schema({"type": "object"})
    if kind == "regex":
        if not spec:
            raise StructuredOutputError("the regex is empty")
        return llguidance.LLMatcher.grammar_from_regex(spec)
    if kind == "choice":
        choices = _json_value(spec, "the choice list")
        if (
            not isinstance(choices, list)
            or not choices
            or not all(isinstance(c, str) and c for c in choices)
        ):
            raise StructuredOutputError("choice must be a non-empty list of non-empty strings")
        return llguidance.LLMatcher.grammar_from_lark(
            "start: " + " | ".join(json.dumps(c) for c in choices)
        )
    if kind == "grammar":
        if not spec.strip():
            raise StructuredOutputError("the grammar is empty")
        try:
            return llguidance.grammar_from("grammar", spec)  # Lark, or GBNF converted to Lark
        except ValueError as exc:
            raise StructuredOutputError(_short(str(exc))) from exc
    raise StructuredOutputError(
        f"unknown structured output kind {kind!r}; expected one of {', '.join(KINDS)}"
    )


def validate(structured: StructuredOutput) -> None:
    """Raise StructuredOutputError unless ``structured`` compiles (without a tokenizer, so the
    API can check it; the few errors a tokenizer adds surface from the engine)."""
    error = llguidance.LLMatcher.validate_grammar(to_grammar(structured))
    if error:
        raise StructuredOutputError(f"invalid {_what(structured.kind)}: {_short(error)}")


def _from_json_schema(schema: dict) -> str:
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults=_JSON_DEFAULTS
        )
    except ValueError as exc:
        raise StructuredOutputError(f"invalid JSON schema: {_short(str(exc))}") from exc


def _json_value(text: str, what: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StructuredOutputError(f"{what} is not valid JSON: {exc}") from exc


def _what(kind: str) -> str:
    return {"json": "JSON schema", "choice": "choice list"}.get(kind, kind)


def _short(message: str) -> str:
    """First lines of an llguidance error: the reason, not a dump of the grammar."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    # The first line says where; a later "error: ..." line (regex errors) says what.
    text = " ".join(lines[:1] + [line for line in lines[1:] if line.startswith("error:")])
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."
