"""OpenAI error bodies: the one place that turns exceptions into error responses.

Views and consumers raise; :func:`error_from_exception` maps every failure the API knows of to
OpenAI's ``{"error": {"message", "type", "param", "code"}}`` with the status OpenAI uses.
"""

from __future__ import annotations

import logging
import math

import redis
from django.http import JsonResponse

from controlplane.common.api_error import ApiError
from engine.text.tokenizer import TokenizerError

logger = logging.getLogger(__name__)

# What a client is told to wait when Redis is unreachable: a restart takes a few seconds.
REDIS_RETRY_AFTER_S = 2


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(message, status=400, param=param, code=code)


def model_not_found(model: str) -> ApiError:
    # Same answer for "does not exist" and "not yours": a tenant learns nothing of others' models.
    return ApiError(
        f"The model `{model}` does not exist or you do not have access to it.",
        status=404,
        param="model",
        code="model_not_found",
    )


def in_terms_of(error: ApiError, names: dict[str, str]) -> ApiError:
    """A planning error about a field of the chat body an API's request was turned into, with
    the field named as that request names it (``names``: chat's name -> the API's). Only
    the field: an index into ``messages`` may count messages the request did not send."""
    if error.param:
        base = error.param.partition(".")[0].split("[", 1)[0]
        if base in names:
            original, error.param = error.param, names[base]
            error.message = error.message.replace(f"'{original}'", f"'{error.param}'", 1)
    return error


def _retry_after(seconds: float | None) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(seconds or 1)))}


def error_from_exception(exc: BaseException) -> ApiError:
    """Every exception the request path can meet, as the ApiError a client should see."""
    from inference import transport as ec  # not at import: keeps this module light

    if isinstance(exc, ApiError):  # AccessError included
        return exc
    if isinstance(exc, TokenizerError):
        return invalid_request(str(exc))
    if isinstance(exc, ec.EngineOverloaded):
        return ApiError(
            str(exc) or "The engine is overloaded; retry later.",
            status=503,
            type="server_error",
            code="engine_overloaded",
            headers=_retry_after(getattr(exc, "retry_after", None)),
        )
    if isinstance(exc, ec.EngineUnavailable):
        return ApiError(
            str(exc) or "No engine is serving this model right now.",
            status=503,
            type="server_error",
            code="engine_unavailable",
            headers=_retry_after(5),
        )
    if isinstance(exc, ec.EngineTimeout):
        return ApiError(
            str(exc) or "The engine did not answer in time.",
            status=504,
            type="server_error",
            code="engine_timeout",
        )
    if isinstance(exc, ec.EngineRefusal):
        return ApiError(str(exc), status=400, type="invalid_request_error", code=exc.code)
    if isinstance(exc, ec.EngineError):
        return ApiError(
            str(exc) or "The engine failed while generating.",
            status=500,
            type="server_error",
            code="engine_error",
        )
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        # Redis stayed unreachable through the clients' retries (redis_pools.py): nothing
        # reached an engine, so the request may simply be sent again.
        logger.warning("Redis unreachable on the request path: %s", exc)
        return ApiError(
            "The service is briefly unavailable (its queue cannot be reached); retry shortly.",
            status=503,
            type="server_error",
            code="service_unavailable",
            headers=_retry_after(REDIS_RETRY_AFTER_S),
        )
    logger.exception("unhandled error on the request path", exc_info=exc)
    return ApiError(
        "The server had an error while processing your request.",
        status=500,
        type="server_error",
        code="internal_error",
    )


def error_response(
    error: ApiError, extra_headers: dict[str, str] | None = None, *, body: dict | None = None
) -> JsonResponse:
    """``error`` with its status and headers; ``body``: another API's shape of it (OpenAI's
    by default)."""
    response = JsonResponse(error.body() if body is None else body, status=error.status)
    for name, value in {**(extra_headers or {}), **error.headers}.items():
        response[name] = value
    return response
