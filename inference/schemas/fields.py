"""Strict JSON fields: OpenAI rejects ``"0.5"`` for a number and ``1`` for a boolean.

DRF's stock fields coerce strings; an SDK user who sends the wrong type should hear about it.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "must be a number."}

    def to_internal_value(self, data):
        if not _is_number(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "must be an integer."}

    def to_internal_value(self, data):
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "must be a boolean."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "must be a string."}

    def __init__(self, **kwargs):
        # Whitespace is part of a prompt (and of a stop string): never strip it.
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
)
class StopField(serializers.Field):
    """``stop``: a string or a list of strings (normalised to a list)."""

    default_error_messages = {"invalid": "must be a string or a list of strings."}

    def to_internal_value(self, data):
        if isinstance(data, str):
            return [data] if data else []
        if isinstance(data, list) and all(isinstance(item, str) for item in data):
            return [item for item in data if item]
        self.fail("invalid")

    def to_representation(self, value):
        return value


class TokenIdListField(serializers.ListField):
    child = StrictIntegerField(min_value=0)
