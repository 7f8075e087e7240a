"""Fields shared by /v1/completions and /v1/chat/completions: OpenAI's and vLLM's extras."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from inference.schemas.fields import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_NAME_LENGTH,
    StopField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    TokenIdListField,
)
from inference.schemas.structured import StructuredRequestFields

MAX_N = 128
MAX_TOP_LOGPROBS = 20
MAX_STOP_TOKEN_IDS = 1024
MAX_LOGIT_BIAS = 300  # entries; OpenAI's limit
MAX_ALLOWED_TOKEN_IDS = 65536
# Far above any useful penalty, and small enough that penalised logits stay finite.
MAX_REPETITION_PENALTY = 100.0


class StreamOptionsSerializer(serializers.Serializer):
    include_usage = StrictBooleanField(required=False, default=False)
    continuous_usage_stats = StrictBooleanField(required=False, default=False)


class SamplingFields(serializers.Serializer):
    """The sampling fields every generation endpoint takes (chat, completions, responses):
    OpenAI's and vLLM's extras, with the bounds that keep any JSON value out of a 5xx."""

    temperature = StrictFloatField(required=False, allow_null=True, min_value=0.0, max_value=2.0)
    top_p = StrictFloatField(required=False, allow_null=True, min_value=0.0, max_value=1.0)
    # vLLM's range: the engine seeds a torch generator per sample with seed + sample index.
    seed = StrictIntegerField(
        required=False, allow_null=True, min_value=INT64_MIN, max_value=INT64_MAX
    )
    presence_penalty = StrictFloatField(
        required=False, allow_null=True, min_value=-2.0, max_value=2.0
    )
    frequency_penalty = StrictFloatField(
        required=False, allow_null=True, min_value=-2.0, max_value=2.0
    )
    stop = StopField(required=False, allow_null=True)
    user = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )
    # OpenAI's successor to ``user``: names the end user (usage, their budget); wins over user.
    safety_identifier = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )
    # OpenAI's processing tiers: "flex" runs the request in the batch class (after every
    # interactive request, as Batch API lines); the others in the tenant's own class.
    service_tier = serializers.ChoiceField(
        choices=["auto", "default", "flex", "scale", "priority"], required=False, allow_null=True
    )
    # vLLM's extra sampling parameters.
    # The engine clamps top_k to the vocabulary; int32 keeps it a valid tensor value.
    top_k = StrictIntegerField(required=False, allow_null=True, min_value=-1, max_value=INT32_MAX)
    min_p = StrictFloatField(required=False, allow_null=True, min_value=0.0, max_value=1.0)
    repetition_penalty = StrictFloatField(
        required=False, allow_null=True, min_value=0.01, max_value=MAX_REPETITION_PENALTY
    )
    ignore_eos = StrictBooleanField(required=False)
    # false: no speculative decoding for this request (docs/api.md); the deployment decides
    # whether its engines speculate at all.
    speculative_decoding = StrictBooleanField(required=False)
    cache_salt = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )
    priority = StrictIntegerField(
        required=False, default=0, min_value=-INT32_MAX - 1, max_value=INT32_MAX
    )

    def validate_top_p(self, value):
        if value is not None and value <= 0.0:
            raise serializers.ValidationError("must be in (0, 1].")
        return value


class SamplingRequestSerializer(StructuredRequestFields, SamplingFields):
    """The body fields both generation endpoints accept (structured outputs included).

    Sampling fields carry no defaults here: what a client leaves out takes the engine
    protocol's default (engine.protocol.SamplingOptions), the platform's one source of them.
    """

    model = StrictCharField(help_text="A model id from GET /v1/models.", max_length=MAX_NAME_LENGTH)
    n = StrictIntegerField(required=False, min_value=1, max_value=MAX_N)
    max_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)
    stream = StrictBooleanField(required=False, default=False)
    stream_options = StreamOptionsSerializer(required=False, allow_null=True)
    logit_bias = serializers.DictField(
        required=False,
        allow_null=True,
        allow_empty=True,
        help_text="Token id (as a string) -> a bias from -100 to 100 added to that token's logit "
        f"before sampling; at most {MAX_LOGIT_BIAS} entries.",
    )
    # vLLM's: only these tokens may be sampled.
    allowed_token_ids = TokenIdListField(
        required=False, allow_null=True, min_length=1, max_length=MAX_ALLOWED_TOKEN_IDS
    )
    min_tokens = StrictIntegerField(required=False, min_value=0)
    stop_token_ids = TokenIdListField(
        required=False, allow_null=True, max_length=MAX_STOP_TOKEN_IDS
    )
    skip_special_tokens = StrictBooleanField(required=False, default=True)
    include_stop_str_in_output = StrictBooleanField(required=False, default=False)
    # vLLM's: the logprob of every prompt token and its top alternatives, in the answer.
    prompt_logprobs = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_TOP_LOGPROBS
    )

    def validate_logit_bias(self, value):
        """OpenAI's shape ({"50256": -100}) as the engine takes it: {50256: -100.0}."""
        if not value:
            return None
        if len(value) > MAX_LOGIT_BIAS:
            raise serializers.ValidationError(
                f"at most {MAX_LOGIT_BIAS} entries are allowed; got {len(value)}."
            )
        bias = {}
        for key, number in value.items():
            # The length first: int() refuses a string of more than 4,300 digits.
            if not (key.isascii() and key.isdigit() and len(key) <= 10) or int(key) > INT32_MAX:
                raise serializers.ValidationError(
                    f"Invalid key {key!r}: keys are token ids, non-negative integers."
                )
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise serializers.ValidationError(
                    f"Invalid value for key {key!r}: a number from -100 to 100 is expected."
                )
            if not -100 <= number <= 100:  # NaN fails too
                raise serializers.ValidationError(
                    f"Invalid value {number!r} for key {key!r}: biases range from -100 to 100."
                )
            bias[int(key)] = float(number)
        return bias

    def num_prompts(self, attrs) -> int:
        """Prompts of the request (each one engine request of ``n`` sequences)."""
        return 1

    def validate(self, attrs):
        if attrs.get("stream_options") and not attrs.get("stream"):
            raise serializers.ValidationError(
                {"stream_options": "stream_options is only allowed when stream is true."}
            )
        if attrs.get("prompt_logprobs") is not None and attrs.get("stream"):
            raise serializers.ValidationError(
                {"prompt_logprobs": "prompt_logprobs is not available when stream is true."}
            )
        n, num_prompts = attrs.get("n", 1), self.num_prompts(attrs)
        limit = settings.API_MAX_SEQUENCES_PER_REQUEST
        if n * num_prompts > limit:
            # Each prompt is n sequences in the engine; name what to lower.
            field = "n" if n > 1 else "prompt"
            raise serializers.ValidationError(
                {
                    field: f"{num_prompts} prompt(s) x n={n} asks for {n * num_prompts} "
                    f"sequences; this server generates at most {limit} per request."
                }
            )
        return attrs
