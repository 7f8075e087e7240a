"""Anthropic's error body, ``{"type": "error", "error": {"type", "message"}}``, on the Messages
routes (and for Messages generations over the WebSocket); the OpenAI routes keep OpenAI's.

The error is the same ApiError every route raises (inference/errors.py maps exceptions to
it once); only its rendering differs, by HTTP status as Anthropic types its errors.
"""

from __future__ import annotations

from typing import Any

from controlplane.common.anthropic_errors import error_type
from controlplane.common.api_error import ApiError


def anthropic_error(error: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` for ``error``."""
    return {"type": "error", "error": {"type": error_type(error.status), "message": error.message}}
