"""Run a serializer over a request body; the first problem becomes a 400 naming its field."""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

from inference.errors import invalid_request


def parse_json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_request(f"We could not parse the JSON body of your request: {exc}") from exc
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


def validate_body(serializer_class: type[serializers.Serializer], body: dict) -> dict[str, Any]:
    serializer = serializer_class(data=body)
    if serializer.is_valid():
        return serializer.validated_data
    param, message = _first_error(serializer.errors)
    text = message if message.startswith("'") else f"'{param}': {message}" if param else message
    raise invalid_request(text, param=param or None)
