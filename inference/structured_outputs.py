"""Request fields -> the one ``StructuredOutput`` the engine enforces, checked before it goes.

Sources, at most one per request: ``response_format`` (``json_object``, ``json_schema``;
``text`` is no constraint), vLLM's ``structured_outputs`` and its older ``guided_*`` names.
``json_schema.strict`` is accepted and changes nothing: the schema is enforced either way
(as in vLLM). A forced tool call (``tool_choice`` "required" or a named function) takes
precedence: the output then is the call, and ``response_format`` applies to answers in words.

A constraint that does not compile (a bad JSON Schema, regex or grammar) is a 400 here, with
the field named, never an engine error.
"""

from __future__ import annotations

import json
from typing import Any

from engine.protocol import StructuredOutput
from engine.structured.spec import validate
from inference.errors import invalid_request
from inference.tools import ToolSetup, structured_for

# (field, kind) of vLLM's older request fields.
GUIDED_FIELDS = (
    ("guided_json", "json"),
    ("guided_regex", "regex"),
    ("guided_choice", "choice"),
    ("guided_grammar", "grammar"),
)


def _spec(kind: str, value: Any) -> StructuredOutput:
    if kind == "json_object":
        return StructuredOutput(kind="json_object")
    if kind in ("json", "choice"):
        return StructuredOutput(kind=kind, spec=json.dumps(value, ensure_ascii=False))
    return StructuredOutput(kind=kind, spec=value)


def _requested(body: dict[str, Any]) -> list[tuple[str, StructuredOutput]]:
    """Every constraint the body asks for, with the field that asked."""
    found = []
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_object":
        found.append(("response_format", _spec("json_object", None)))
    elif response_format.get("type") == "json_schema":
        schema = response_format["json_schema"].get("schema")
        found.append(("response_format", _spec("json", schema if schema is not None else {})))
    structured = body.get("structured_outputs") or {}
    for kind in ("json", "regex", "choice", "grammar", "json_object"):
        if structured.get(kind) not in (None, False):
            found.append(("structured_outputs", _spec(kind, structured[kind])))
    for field, kind in GUIDED_FIELDS:
        if body.get(field) is not None:
            found.append((field, _spec(kind, body[field])))
    return found


def check(structured: StructuredOutput, *, param: str) -> None:
    """400 naming ``param`` when the engine could not compile ``structured`` (the engine's
    own torch-free check, engine.structured.spec)."""
    try:
        validate(structured)
    except ValueError as exc:
        raise invalid_request(f"Invalid {param}: {exc}", param=param) from exc


def structured_output_for(
    body: dict[str, Any], tools: ToolSetup | None = None
) -> StructuredOutput | None:
    """The constraint of this request (validated), or None."""
    forced = structured_for(tools)
    if forced is not None:
        check(forced, param="tools")
        return forced
    requested = _requested(body)
    if len(requested) > 1:
        names = ", ".join(dict.fromkeys(param for param, _ in requested))
        raise invalid_request(
            f"Give one structured-output constraint per request; this one has several ({names}).",
            param=requested[1][0],
        )
    if not requested:
        return None
    param, structured = requested[0]
    check(structured, param=param)
    return structured
