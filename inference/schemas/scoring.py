"""Request bodies of POST /v1/rerank (Cohere's v1 and v2 and Jina's shape) and /v1/score
(vLLM's)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import (
    INVALID_TEXT,
    MAX_NAME_LENGTH,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    is_valid_text,
)

# Cohere's recommended maximum per request; a longer list is a 400 (split it over requests).
MAX_RERANK_DOCUMENTS = 1000
MAX_SCORE_PAIRS = MAX_RERANK_DOCUMENTS


@extend_schema_field(
    {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_RERANK_DOCUMENTS,
        "items": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "additionalProperties": True,
                },
            ]
        },
    }
)
class DocumentsField(serializers.Field):
    """``documents``: strings, or objects whose ``text`` (or ``rank_fields``) holds the text
    (Cohere v1 keeps an object's other fields in the response)."""

    default_error_messages = {
        "invalid": "must be a list of strings or of objects with a `text` field.",
        "empty": "must not be empty.",
        "too_many": f"must hold at most {MAX_RERANK_DOCUMENTS} documents, got {{count}}.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, list) or not all(isinstance(d, str | dict) for d in data):
            self.fail("invalid")
        if not data:
            self.fail("empty")
        if len(data) > MAX_RERANK_DOCUMENTS:
            self.fail("too_many", count=len(data))
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
        ]
    }
)
class TextsField(serializers.Field):
    """A string or a non-empty list of strings (normalised to a list)."""

    default_error_messages = {
        "invalid": "must be a string or a list of strings.",
        "empty": "must not be empty.",
        "too_many": f"must hold at most {MAX_SCORE_PAIRS} texts, got {{count}}.",
        "text": INVALID_TEXT,
    }

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [data]
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            self.fail("invalid")
        if not data:
            self.fail("empty")
        if len(data) > MAX_SCORE_PAIRS:
            self.fail("too_many", count=len(data))
        if not all(is_valid_text(t) for t in data):
            self.fail("text")
        return data

    def to_representation(self, value):
        return value


class RelevantSpansSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["enabled", "disabled"])
    threshold = serializers.FloatField(required=False, allow_null=True)
    max_spans = StrictIntegerField(required=False, allow_null=True, min_value=1)

    def validate_mode(self, value):
        if value == "enabled":
            raise serializers.ValidationError("relevant spans are not supported by this server.")
        return value


class RerankRequestSerializer(serializers.Serializer):
    model = StrictCharField(max_length=MAX_NAME_LENGTH)
    query = StrictCharField(help_text="The search query.")
    documents = DocumentsField(
        help_text=f"Up to {MAX_RERANK_DOCUMENTS} texts, or objects with a `text` field."
    )
    top_n = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        help_text="How many of the best documents to return; all when absent or 0.",
    )
    return_documents = StrictBooleanField(
        required=False,
        allow_null=True,
        help_text="Return each document with its score: by default on /v1/rerank (Jina's and "
        "vLLM's behaviour), not on /v2/rerank (Cohere v2's).",
    )
    max_tokens_per_doc = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="Cut each document to this many tokens (Cohere v2). Documents longer than "
        "the model takes are cut to fit in any case.",
    )
    rank_fields = serializers.ListField(
        child=StrictCharField(max_length=MAX_NAME_LENGTH),
        required=False,
        allow_null=True,
        allow_empty=False,
        max_length=32,
        help_text="Object documents: the fields ranked, in this order (Cohere v1); `text` "
        "when absent.",
    )
    max_chunks_per_doc = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="Accepted (Cohere v1); documents are not split into chunks, only cut.",
    )
    relevant_spans = RelevantSpansSerializer(required=False, allow_null=True)
    priority = StrictIntegerField(
        required=False, allow_null=True, help_text="Accepted (Cohere v2) and ignored."
    )

    def validate_query(self, value):
        if not is_valid_text(value):
            raise serializers.ValidationError(INVALID_TEXT)
        return value

    def validate(self, attrs):
        attrs["texts"] = [
            _document_text(document, index, attrs.get("rank_fields"))
            for index, document in enumerate(attrs["documents"])
        ]
        return attrs


def _document_text(document: str | dict, index: int, rank_fields: list[str] | None) -> str:
    """The text ranked for one document: itself, its ``text``, or its ``rank_fields`` as
    ``field: value`` lines (the YAML-like form Cohere advises for structured documents)."""
    if isinstance(document, str):
        text = document
    elif rank_fields:
        missing = [name for name in rank_fields if not isinstance(document.get(name), str)]
        if missing:
            raise serializers.ValidationError(
                {"documents": {index: [f"has no string field `{missing[0]}` (rank_fields)."]}}
            )
        text = "\n".join(f"{name}: {document[name]}" for name in rank_fields)
    elif isinstance(document.get("text"), str):
        text = document["text"]
    else:
        raise serializers.ValidationError(
            {"documents": {index: ["must be a string or an object with a string `text` field."]}}
        )
    if not is_valid_text(text):
        raise serializers.ValidationError({"documents": {index: [INVALID_TEXT]}})
    return text


class ScoreRequestSerializer(serializers.Serializer):
    model = StrictCharField(max_length=MAX_NAME_LENGTH)
    text_1 = TextsField(help_text="The first text of every pair: one, or one per `text_2`.")
    text_2 = TextsField(help_text="The second text of every pair.")
    truncate_prompt_tokens = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=-1,
        help_text="Cut inputs longer than this many tokens (-1: the model's limit) instead of "
        "refusing them; `text_2` is cut first.",
    )
    user = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )

    def validate(self, attrs):
        firsts, seconds = attrs["text_1"], attrs["text_2"]
        if len(firsts) > 1 and len(firsts) != len(seconds):
            raise serializers.ValidationError(
                {
                    "text_1": [
                        f"holds {len(firsts)} texts and `text_2` {len(seconds)}: pair one "
                        "`text_1` with every `text_2` (1:N), or as many of each (N:N)."
                    ]
                }
            )
        if attrs.get("truncate_prompt_tokens") == 0:
            raise serializers.ValidationError(
                {"truncate_prompt_tokens": ["must be -1 (the model's limit) or at least 1."]}
            )
        return attrs
