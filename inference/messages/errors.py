"""Anthropic's error body, ``{"type": "error", "error": {"type", "message"}}``, on the Messages
routes (and for Messages generations over the WebSocket); the OpenAI routes keep OpenAI's.

The error is the same ApiError every route raises (inference/errors.py maps exceptions to
it once); only its rendering differs, by HTTP status as Anthropic types its errors.
"""

from __future__ import annotations

from typing import Any

from controlplane.common.api_error import ApiError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(error: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` for ``error``."""
    return {"type": "error", "error": {"type": error_type(error.status), "message": error.message}}
