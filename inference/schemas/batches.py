"""/v1/batches: the creation body, and the batch objects the endpoints answer with (rendered
by controlplane/batches/representation.py; these describe them in the schema).

The body's values (an endpoint batches run, the window, the metadata's size) are checked by
``batch_create``, after the key's scope for the endpoint: the serializer reads the fields."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.batches.models import Batch
from controlplane.batches.services import COMPLETION_WINDOWS, ENDPOINTS
from inference.schemas.fields import StrictCharField
from inference.schemas.validation import missing_field_errors

METADATA = {"type": "object", "nullable": True, "additionalProperties": {"type": "string"}}


def _required_text(name: str) -> dict[str, str]:
    return missing_field_errors(f"`{name}` is required (a string).")


@extend_schema_field({"type": "string", "enum": list(ENDPOINTS)})
class BatchEndpointField(StrictCharField):
    """The endpoint the batch's lines call."""


@extend_schema_field({"type": "string", "enum": list(COMPLETION_WINDOWS)})
class CompletionWindowField(StrictCharField):
    """How long the batch may take."""


@extend_schema_field(METADATA)
class MetadataField(serializers.JSONField):
    """Up to 16 string pairs, kept with the batch."""


class BatchCreateSerializer(serializers.Serializer):
    input_file_id = StrictCharField(
        help_text="A file uploaded with purpose batch",
        error_messages=_required_text("input_file_id"),
    )
    endpoint = BatchEndpointField(error_messages=_required_text("endpoint"))
    completion_window = CompletionWindowField(error_messages=_required_text("completion_window"))
    metadata = MetadataField(required=False, allow_null=True)


class RequestCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField(min_value=0)
    completed = serializers.IntegerField(min_value=0)
    failed = serializers.IntegerField(min_value=0)


def _unix_time() -> serializers.IntegerField:
    return serializers.IntegerField(required=False, allow_null=True, help_text="Unix time")


class BatchObjectSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["batch"])
    endpoint = serializers.CharField()
    errors = serializers.DictField(required=False, allow_null=True)
    input_file_id = serializers.CharField()
    completion_window = serializers.ChoiceField(choices=list(COMPLETION_WINDOWS))
    status = serializers.ChoiceField(choices=Batch.Status.values)
    output_file_id = serializers.CharField(required=False, allow_null=True)
    error_file_id = serializers.CharField(required=False, allow_null=True)
    created_at = serializers.IntegerField(help_text="Unix time")
    in_progress_at = _unix_time()
    expires_at = _unix_time()
    finalizing_at = _unix_time()
    completed_at = _unix_time()
    failed_at = _unix_time()
    expired_at = _unix_time()
    cancelling_at = _unix_time()
    cancelled_at = _unix_time()
    request_counts = RequestCountsSerializer(required=False)
    metadata = MetadataField(required=False, allow_null=True)
