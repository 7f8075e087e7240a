"""/v1/files: the upload's multipart body, and the file objects the endpoints answer with
(rendered by controlplane/batches/representation.py; these describe them in the schema)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.batches.models import StoredFile
from inference.schemas.fields import StrictCharField
from inference.schemas.validation import missing_field_errors


@extend_schema_field({"type": "string", "format": "binary"})
class UploadedFileField(serializers.FileField):
    """The multipart file as Django stored it (a temporary file when big). Its size and name
    are the service's to judge: it words those refusals (413, empty file) for every caller."""

    def to_internal_value(self, data):
        return data


@extend_schema_field({"type": "string", "enum": ["batch"]})
class UploadPurposeField(StrictCharField):
    """Any purpose is read; the service refuses those it does not store, saying which it does."""


class FileUploadSerializer(serializers.Serializer):
    file = UploadedFileField(
        help_text="JSONL, one request a line",
        error_messages=missing_field_errors("Send the file as the multipart field `file`."),
    )
    purpose = UploadPurposeField(
        error_messages=missing_field_errors("Give the file's `purpose` (`batch`).")
    )


class FileObjectSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["file"])
    bytes = serializers.IntegerField(min_value=0)
    created_at = serializers.IntegerField(help_text="Unix time")
    filename = serializers.CharField()
    purpose = serializers.ChoiceField(choices=StoredFile.PURPOSES)
    status = serializers.ChoiceField(choices=["uploaded", "processed", "error"], required=False)
    expires_at = serializers.IntegerField(required=False, allow_null=True, help_text="Unix time")
    status_details = serializers.CharField(required=False, allow_null=True)


class FileDeletedSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["file"])
    deleted = serializers.BooleanField()
