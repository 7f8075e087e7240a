"""The one exception type the API answers with: OpenAI's error fields plus an HTTP status.

Dependency-free: the control plane's access policy raises it, and the API maps every other
failure onto it (inference/errors.py).
"""

from __future__ import annotations


class ApiError(Exception):
    """A refusal with OpenAI's error fields and the HTTP status to answer with."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        """OpenAI's error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def object_not_found(what: str, object_id: str, *, param: str, code: str = "not_found") -> ApiError:
    """The 404 for a tenant's object: the same answer for an id that never existed, a
    deleted one and another tenant's, so nothing leaks across tenants."""
    return ApiError(f"No {what} found with id '{object_id}'.", status=404, param=param, code=code)
