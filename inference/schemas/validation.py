"""Run a serializer over a request body; the first problem becomes a 400 naming its field."""

from __future__ import annotations

import gc
import json
import re
import threading
from typing import Any

from rest_framework import serializers

from inference.errors import ApiError, invalid_request

# Deeper than any request of the API needs (chat content parts sit at depth 5), and far from
# the interpreter's recursion limit, which code walking the body (templates, tojson) would hit.
MAX_JSON_DEPTH = 64


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; a 400 for anything else, nesting too deep included."""
    try:
        body = _loads_without_gc(raw)
    except RecursionError as exc:  # json's parser recurses once per level
        raise _too_deep() from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_request(f"We could not parse the JSON body of your request: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    if nested_deeper_than(raw, MAX_JSON_DEPTH):
        raise _too_deep()
    return body


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _loads_without_gc(raw: bytes) -> Any:
    """``json.loads`` with the cyclic GC paused: it would otherwise scan the growing result
    again and again (5x slower on a body of a million small arrays). JSON holds no cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    finally:
        if enabled:
            gc.enable()


def _too_deep() -> ApiError:
    return invalid_request(
        f"The JSON body of your request is nested deeper than {MAX_JSON_DEPTH} levels."
    )


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


def nested_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the arrays and objects of valid JSON ``raw`` nest more than ``limit`` deep.

    Byte operations only (a Python walk over a million parsed containers takes seconds):
    drop escaped backslashes and escaped quotes, keep only brackets and quotes, drop strings
    (adjacent quotes first: they close an empty string or join two strings with nothing
    between); then each pass removes the innermost ``[]`` and ``{}`` pairs, one level (a
    marker keeps a pass from also removing the pair it uncovers).
    """
    shape = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    shape = _STRING.sub(b"", shape.replace(b'""', b""))
    for _ in range(limit):
        if not shape:
            return False
        shape = shape.replace(b"[]", b"\0").replace(b"{}", b"\0").replace(b"\0", b"")
    return bool(shape)


def _first_error(errors, path: str = "") -> tuple[str, str]:
    """Walk DRF's nested error structure down to the first message and its dotted field path."""
    if isinstance(errors, dict):
        field, nested = next(iter(errors.items()))
        if isinstance(field, int):  # a list item, as DRF reports errors in many=True fields
            return _first_error(nested, f"{path}[{field}]")
        name = "" if field == "non_field_errors" else str(field)
        return _first_error(nested, f"{path}.{name}" if path and name else path or name)
    if isinstance(errors, list) and errors:
        for index, item in enumerate(errors):
            if isinstance(item, dict | list) and item:
                return _first_error(item, f"{path}[{index}]" if path else str(index))
            if item:
                return path, str(item)
    return path, str(errors)


def missing_field_errors(message: str) -> dict[str, str]:
    """A field's ``error_messages`` that refuse every way of leaving it out (absent, null,
    empty, not a string) with one message. Write it as a sentence naming the field in
    backticks: ``validate_body`` then passes it on as it is."""
    return dict.fromkeys(("required", "null", "blank", "invalid"), message)


def _names_its_field(message: str, param: str) -> bool:
    return message.startswith("'") or f"`{param}`" in message


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.serializers: dict[type[serializers.Serializer], serializers.Serializer] = {}


_per_thread = _PerThread()


def _serializer(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """One instance of ``serializer_class`` per thread, reused for every body. A new instance
    deep-copies the class's declared fields, nested serializers and all: 13% of the API
    process's CPU while it took a burst of completions (py-spy, 2026-11-26), more than
    validating the body itself. Validation keeps no state on the instance: our serializers
    read neither ``initial_data`` nor a context, and ``run_validation`` (what ``is_valid``
    runs) returns the validated data or raises."""
    instances = _per_thread.serializers
    serializer = instances.get(serializer_class)
    if serializer is None:
        serializer = instances[serializer_class] = serializer_class()
    return serializer


def validate_body(serializer_class: type[serializers.Serializer], body: dict) -> dict[str, Any]:
    """The serializer's validated data; its first problem as a 400 naming the field (in the
    message too, as ``'field': problem``, unless the message names it already)."""
    try:
        return _serializer(serializer_class).run_validation(body)
    except serializers.ValidationError as exc:
        errors = exc.detail
    param, message = _first_error(errors)
    named = not param or _names_its_field(message, param)
    raise invalid_request(message if named else f"'{param}': {message}", param=param or None)
