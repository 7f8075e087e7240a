"""OpenAPI descriptions of /v1/files and /v1/batches (their bodies are read by hand, not by
serializers, so drf-spectacular cannot guess them)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

_ID = {"type": "string"}
_TIME = {"type": "integer", "description": "Unix time"}
_MAYBE_TIME = {"type": "integer", "nullable": True, "description": "Unix time"}
_COUNT = {"type": "integer", "minimum": 0}

FILE = {
    "type": "object",
    "properties": {
        "id": _ID,
        "object": {"type": "string", "enum": ["file"]},
        "bytes": _COUNT,
        "created_at": _TIME,
        "filename": {"type": "string"},
        "purpose": {"type": "string", "enum": ["batch", "batch_output"]},
        "status": {"type": "string", "enum": ["uploaded", "processed", "error"]},
        "expires_at": _MAYBE_TIME,
        "status_details": {"type": "string", "nullable": True},
    },
    "required": ["id", "object", "bytes", "created_at", "filename", "purpose"],
}
FILE_UPLOAD = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "JSONL, one request a line"},
        "purpose": {"type": "string", "enum": ["batch"]},
    },
    "required": ["file", "purpose"],
}
BATCH = {
    "type": "object",
    "properties": {
        "id": _ID,
        "object": {"type": "string", "enum": ["batch"]},
        "endpoint": {"type": "string"},
        "errors": {"type": "object", "nullable": True},
        "input_file_id": _ID,
        "completion_window": {"type": "string", "enum": ["24h"]},
        "status": {
            "type": "string",
            "enum": [
                "validating",
                "failed",
                "in_progress",
                "finalizing",
                "completed",
                "expired",
                "cancelling",
                "cancelled",
            ],
        },
        "output_file_id": {"type": "string", "nullable": True},
        "error_file_id": {"type": "string", "nullable": True},
        "created_at": _TIME,
        **{
            f"{stage}_at": _MAYBE_TIME
            for stage in (
                "in_progress",
                "expires",
                "finalizing",
                "completed",
                "failed",
                "expired",
                "cancelling",
                "cancelled",
            )
        },
        "request_counts": {
            "type": "object",
            "properties": {"total": _COUNT, "completed": _COUNT, "failed": _COUNT},
            "required": ["total", "completed", "failed"],
        },
        "metadata": {
            "type": "object",
            "nullable": True,
            "additionalProperties": {"type": "string"},
        },
    },
    "required": [
        "id",
        "object",
        "endpoint",
        "input_file_id",
        "completion_window",
        "status",
        "created_at",
    ],
}
BATCH_CREATE = {
    "type": "object",
    "properties": {
        "input_file_id": {"type": "string", "description": "A file uploaded with purpose batch"},
        "endpoint": {
            "type": "string",
            "enum": ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"],
        },
        "completion_window": {"type": "string", "enum": ["24h"]},
        "metadata": {
            "type": "object",
            "nullable": True,
            "additionalProperties": {"type": "string"},
        },
    },
    "required": ["input_file_id", "endpoint", "completion_window"],
}


def _page(item: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": item},
            "first_id": {"type": "string", "nullable": True},
            "last_id": {"type": "string", "nullable": True},
            "has_more": {"type": "boolean"},
        },
        "required": ["object", "data", "has_more"],
    }


PAGE_PARAMETERS = [
    OpenApiParameter("after", str, description="List after this id (a cursor)."),
    OpenApiParameter("limit", int, description="At most this many (1 to 100)."),
]

FILE_FOUND = OpenApiResponse(response=FILE, description="A file of your tenant.")
FILE_LIST = OpenApiResponse(response=_page(FILE), description="Your tenant's files.")
FILE_DELETED = OpenApiResponse(
    response={
        "type": "object",
        "properties": {
            "id": _ID,
            "object": {"type": "string", "enum": ["file"]},
            "deleted": {"type": "boolean"},
        },
        "required": ["id", "object", "deleted"],
    },
    description="The file and its bytes were deleted.",
)
FILE_CONTENT = OpenApiResponse(
    response={"type": "string", "format": "binary"}, description="The file's bytes, streamed."
)
BATCH_FOUND = OpenApiResponse(response=BATCH, description="A batch of your tenant.")
BATCH_LIST = OpenApiResponse(response=_page(BATCH), description="Your tenant's batches.")
