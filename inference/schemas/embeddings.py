"""POST /v1/embeddings request body."""

from __future__ import annotations

from rest_framework import serializers

from inference.schemas.completions import PromptField
from inference.schemas.fields import MAX_NAME_LENGTH, StrictCharField, StrictIntegerField

MAX_EMBEDDING_INPUTS = 2048


class EmbeddingRequestSerializer(serializers.Serializer):
    model = StrictCharField(max_length=MAX_NAME_LENGTH)
    input = PromptField(
        max_prompts=MAX_EMBEDDING_INPUTS,
        help_text="Text, a list of texts, token ids or a list of token-id lists.",
    )
    encoding_format = serializers.ChoiceField(
        choices=["float", "base64"], required=False, default="float"
    )
    dimensions = StrictIntegerField(required=False, allow_null=True, min_value=1)
    user = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )
