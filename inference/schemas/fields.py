"""Strict JSON fields: OpenAI rejects ``"0.5"`` for a number and ``1`` for a boolean.

DRF's stock fields coerce strings; an SDK user who sends the wrong type should hear about it.
Every integer is bounded (int64 unless a field says less), so no value overflows the engine's
64-bit message fields or tensors, and text must be valid Unicode (JSON's ``\\ud800`` escape
decodes to a lone surrogate that no tokenizer or encoder accepts).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.common.json_text import is_valid_text

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Of a model or adapter name (those are at most 200 characters), a user or a cache salt.
MAX_NAME_LENGTH = 256


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


INVALID_TEXT = "must be valid Unicode text (it holds a lone surrogate)."


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "must be a number."}

    def to_internal_value(self, data):
        if not _is_number(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "must be an integer."}

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", INT64_MIN)
        kwargs.setdefault("max_value", INT64_MAX)
        super().__init__(**kwargs)

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
    default_error_messages = {"invalid": "must be a string.", "text": INVALID_TEXT}

    def __init__(self, **kwargs):
        # Whitespace is part of a prompt (and of a stop string): never strip it.
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if not is_valid_text(data):
            self.fail("text")
        return super().to_internal_value(data)


@extend_schema_field(
    {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
)
class StopField(serializers.Field):
    """``stop``: a string or a list of strings (normalised to a list).

    Bounded: every generated token is matched against every stop string.
    """

    MAX_STRINGS = 16
    MAX_LENGTH = 256
    default_error_messages = {
        "invalid": "must be a string or a list of strings.",
        "too_many": f"must hold at most {MAX_STRINGS} stop strings.",
        "too_long": f"stop strings must be at most {MAX_LENGTH} characters long.",
        "text": INVALID_TEXT,
    }

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [data]
        if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
            self.fail("invalid")
        if len(data) > self.MAX_STRINGS:
            self.fail("too_many")
        if any(len(item) > self.MAX_LENGTH for item in data):
            self.fail("too_long")
        if not all(is_valid_text(item) for item in data):
            self.fail("text")
        return [item for item in data if item]

    def to_representation(self, value):
        return value


class TokenIdListField(serializers.ListField):
    child = StrictIntegerField(min_value=0)


def optional_list(child: serializers.Field, **kwargs) -> serializers.ListSerializer:
    """A list that may be absent or null, of items that may not be null. DRF's ``many=True``
    hands ``allow_null`` to the items as well, so ``"tools": [null]`` got through validation
    and failed later with a 500."""
    return serializers.ListSerializer(
        child=child, required=False, allow_null=True, allow_empty=True, **kwargs
    )


class MetadataField(serializers.DictField):
    """OpenAI's ``metadata``: at most 16 pairs, keys up to 64 characters, values strings up
    to 512."""

    MAX_PAIRS = 16
    MAX_KEY_LENGTH = 64

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(child=StrictCharField(max_length=512, allow_blank=True), **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if len(value) > self.MAX_PAIRS:
            raise serializers.ValidationError(f"must hold at most {self.MAX_PAIRS} pairs.")
        for key in value:
            if not key or len(key) > self.MAX_KEY_LENGTH:
                raise serializers.ValidationError(
                    f"keys must be 1 to {self.MAX_KEY_LENGTH} characters long."
                )
        return value
