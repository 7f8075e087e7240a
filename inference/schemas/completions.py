"""POST /v1/completions request body."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import (
    INVALID_TEXT,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    is_valid_text,
)
from inference.schemas.sampling import MAX_TOP_LOGPROBS, SamplingRequestSerializer


def _is_token_ids(value) -> bool:
    # set(map(type, ...)) runs in C: a body may hold millions of ids.
    return (
        isinstance(value, list)
        and bool(value)
        and set(map(type, value)) == {int}
        and min(value) >= 0
    )


_TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}},
            _TOKEN_IDS,
            {"type": "array", "items": _TOKEN_IDS},
        ]
    }
)
class PromptField(serializers.Field):
    """``prompt``: text, a list of texts, token ids or a list of token-id lists.

    Normalised to a list of prompts, each either ``str`` or ``list[int]``; at most
    ``max_prompts`` of them (checked before looking at any).
    """

    default_error_messages = {
        "invalid": (
            "must be a string, a list of strings, a list of token ids or a list of token-id lists."
        ),
        "empty": "must not be empty.",
        "too_many": "must hold at most {max_prompts} items, got {count}.",
        "text": INVALID_TEXT,
    }

    def __init__(self, *, max_prompts: int = 2048, **kwargs):
        self.max_prompts = max_prompts
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [data]
        if not isinstance(data, list) or not data:
            self.fail("empty" if data == [] else "invalid")
        if len(data) > self.max_prompts and not _is_token_ids(data):
            self.fail("too_many", max_prompts=self.max_prompts, count=len(data))
        if all(isinstance(item, str) for item in data):
            if not all(data):
                self.fail("empty")
            if not all(is_valid_text(item) for item in data):
                self.fail("text")
            return list(data)
        if _is_token_ids(data):
            return [list(data)]
        if all(_is_token_ids(item) for item in data):
            return [list(item) for item in data]
        self.fail("invalid")

    def to_representation(self, value):
        return value


class CompletionRequestSerializer(SamplingRequestSerializer):
    prompt = PromptField()
    # 0 with echo: the prompt scored (its logprobs), nothing generated, as OpenAI allows.
    max_tokens = StrictIntegerField(required=False, allow_null=True, min_value=0)
    echo = StrictBooleanField(required=False, default=False)
    logprobs = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_TOP_LOGPROBS
    )
    suffix = StrictCharField(required=False, allow_null=True, allow_blank=True)
    best_of = StrictIntegerField(required=False, allow_null=True, min_value=1)
    add_special_tokens = StrictBooleanField(required=False, default=True)

    def validate_suffix(self, value):
        if value:
            raise serializers.ValidationError("suffix is not supported by this server.")
        return value

    def num_prompts(self, attrs) -> int:
        return len(attrs["prompt"])

    def validate(self, attrs):
        attrs = super().validate(attrs)
        best_of = attrs.get("best_of")
        if best_of is not None and best_of != attrs.get("n", 1):
            raise serializers.ValidationError({"best_of": "best_of must equal n on this server."})
        if attrs.get("max_tokens") == 0 and not attrs.get("echo"):
            raise serializers.ValidationError(
                {
                    "max_tokens": "max_tokens 0 needs echo: it asks for the prompt back (with "
                    "logprobs, scored) and nothing generated."
                }
            )
        return attrs
