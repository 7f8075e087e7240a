"""Run a serializer over a request body; the first problem becomes a 400 naming its field."""

from __future__ import annotations

import threading
from typing import Any

from rest_framework import serializers

from controlplane.common.json_text import JsonTextError, loads_json
from inference.errors import invalid_request


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; a 400 for anything else (json_text.loads_json's rules)."""
    try:
        body = loads_json(raw)
    except JsonTextError as exc:
        raise invalid_request(exc.message, param=exc.param) from exc
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    return body


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
