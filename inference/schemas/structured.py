"""Structured-output request fields: OpenAI's ``response_format`` and vLLM's extras.

``structured_outputs`` ({"json" | "regex" | "choice" | "grammar" | "json_object": ...}) and
vLLM's older ``guided_json``/``guided_regex``/``guided_choice``/``guided_grammar``. Shapes
are checked here; whether a schema, regex or grammar compiles is checked in planning
(inference/structured_outputs.py), still before the engine sees the request.
"""

from __future__ import annotations

import json
import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import StrictBooleanField, StrictCharField

MAX_CHOICES = 1024
MAX_CHOICE_LENGTH = 1024
# OpenAI's rule for names of schemas and functions.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NAME_ERROR = "must be 1-64 characters: letters, digits, '_' or '-'."


@extend_schema_field(
    {"oneOf": [{"type": "object", "additionalProperties": True}, {"type": "string"}]}
)
class JsonSchemaField(serializers.Field):
    """A JSON Schema: an object, or JSON text of one (vLLM accepts both). Normalised to a dict."""

    default_error_messages = {"invalid": "must be a JSON Schema: an object, or JSON text of one."}

    def to_internal_value(self, data):
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                self.fail("invalid")
        if not isinstance(data, dict):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class ChoiceListField(serializers.ListField):
    child = StrictCharField(max_length=MAX_CHOICE_LENGTH)

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_empty", False)
        kwargs.setdefault("max_length", MAX_CHOICES)
        super().__init__(**kwargs)


class JsonSchemaFormatSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64)
    description = StrictCharField(required=False, allow_blank=True)
    schema = JsonSchemaField(required=False)
    # Accepted as OpenAI defines it; the schema is enforced either way (as vLLM does).
    strict = StrictBooleanField(required=False, allow_null=True)

    def validate_name(self, value):
        if not NAME_PATTERN.match(value):
            raise serializers.ValidationError(NAME_ERROR)
        return value


class ResponseFormatSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text", "json_object", "json_schema"])
    json_schema = JsonSchemaFormatSerializer(required=False)

    def validate(self, attrs):
        if attrs["type"] == "json_schema" and "json_schema" not in attrs:
            raise serializers.ValidationError(
                {"json_schema": "is required when type is 'json_schema'."}
            )
        return attrs


class StructuredOutputsSerializer(serializers.Serializer):
    """vLLM's ``structured_outputs``: exactly one constraint."""

    json = JsonSchemaField(required=False)
    regex = StrictCharField(required=False)
    choice = ChoiceListField(required=False)
    grammar = StrictCharField(required=False)
    json_object = StrictBooleanField(required=False)

    KINDS = ("json", "regex", "choice", "grammar", "json_object")

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.KINDS))
            if unknown:
                raise serializers.ValidationError(
                    f"{', '.join(unknown)} not supported; give one of {', '.join(self.KINDS)}."
                )
        return super().to_internal_value(data)

    def validate(self, attrs):
        given = [k for k in self.KINDS if attrs.get(k) not in (None, False)]
        if len(given) != 1:
            raise serializers.ValidationError(
                f"give exactly one of {', '.join(self.KINDS)} (got {len(given)})."
            )
        return attrs


class StructuredRequestFields(serializers.Serializer):
    """The structured-output fields of /v1/chat/completions and /v1/completions."""

    response_format = ResponseFormatSerializer(required=False, allow_null=True)
    structured_outputs = StructuredOutputsSerializer(required=False, allow_null=True)
    guided_json = JsonSchemaField(required=False, allow_null=True)
    guided_regex = StrictCharField(required=False, allow_null=True)
    guided_choice = ChoiceListField(required=False, allow_null=True)
    guided_grammar = StrictCharField(required=False, allow_null=True)
    # vLLM picks a backend per request; this server has one (llguidance): accepted, unused.
    guided_decoding_backend = StrictCharField(required=False, allow_null=True, max_length=64)
