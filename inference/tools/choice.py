"""``tool_choice`` "required" and named functions, enforced with the structured-output machinery.

A named function: the output is its arguments, constrained to its parameters schema; the API
wraps it as one call. "required": the output is a JSON array of ``{"name", "parameters"}``
objects, each constrained to one tool's schema (``anyOf`` over the tools), at least one item
and, without ``parallel_tool_calls``, at most one. Either way the arguments always parse
against the function's schema, whatever the weights say.

Objects of a parameters schema that do not say whether they take properties beyond the ones
listed take none here (``additionalProperties: false``): arguments stay valid for the schema
as written, and a model cannot wander into made-up keys until it runs out of tokens (random
weights did, through LangChain's ``bind_tools`` schemas, which leave it open).
"""

from __future__ import annotations

import json
from typing import Any

from engine.protocol import StructuredOutput
from inference.tools.definitions import ToolSetup

# Keywords whose value is one subschema, or a list or a map of them.
_ONE = ("items", "additionalItems", "not", "contains", "propertyNames", "if", "then", "else")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that lists properties
    and says nothing about others (a copy; the rest as given)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE:
        if key in out:
            out[key] = closed(out[key])
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [closed(sub) for sub in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(sub) for name, sub in out[key].items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def required_calls_schema(setup: ToolSetup) -> dict[str, Any]:
    """The JSON Schema of "one or more calls of these tools"."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [function.name]},
                "parameters": closed(function.parameters_schema),
            },
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for function in setup.functions
    ]
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": calls[0] if len(calls) == 1 else {"anyOf": calls},
    }
    if not setup.parallel:
        schema["maxItems"] = 1
    return schema


def structured_for(setup: ToolSetup | None) -> StructuredOutput | None:
    """The constraint that forces the calls ``setup`` asks for; None when nothing is forced."""
    if setup is None:
        return None
    if setup.mode == "named":
        schema = closed(setup.function(setup.named).parameters_schema)
    elif setup.mode == "required":
        schema = required_calls_schema(setup)
    else:
        return None
    return StructuredOutput(kind="json", spec=json.dumps(schema, ensure_ascii=False))
