"""The base of every API view: async, authenticated, errors mapped in one place.

Views subclass DRF's APIView only so drf-spectacular can describe them (``extend_schema``);
requests are served by Django's async view machinery, not by DRF's synchronous dispatch.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from rest_framework.parsers import JSONParser
from rest_framework.views import APIView

from controlplane.access.admission import Admission, finish
from controlplane.access.principals import Principal
from inference import credentials
from inference.errors import ApiError, error_from_exception, error_response
from inference.limits import admit
from inference.schemas.validation import parse_json_body


class AsyncApiView(APIView):
    """Async dispatch; subclasses write ``async def get/post(self, request)``."""

    parser_classes = [JSONParser]  # what the schema advertises; bodies are parsed by json_body

    endpoint = ""  # the scope name the key's scopes are checked against

    async def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.request = request
        self.args, self.kwargs = args, kwargs
        # x-ratelimit-* of an admitted request: on its response, and on its error response.
        self.response_headers: dict[str, str] = {}
        self.admission: Admission | None = None  # a one-shot request's (see ``admit``)
        self.started = time.monotonic()
        handler = getattr(self, request.method.lower(), None)
        if handler is None or request.method.lower() not in self.http_method_names:
            return self.error_response(
                ApiError(f"Method {request.method} is not allowed here.", status=405)
            )
        try:
            response = await handler(request, *args, **kwargs)
        except asyncio.CancelledError:
            await self.finish_admission(status=499)
            raise
        except Exception as exc:
            error = error_from_exception(exc)
            try:
                await self.finish_admission(status=error.status)
                return self.error_response(error, self.response_headers)
            finally:
                # ``error`` is often ``exc`` itself, whose traceback holds this frame: kept
                # here, the two would be a cycle (this view, its request) that only a full
                # collection frees, one per refused request.
                del error
        for name, value in self.response_headers.items():
            response[name] = value
        return response

    def error_response(self, error: ApiError, headers: dict[str, str] | None = None):
        """How this route answers a refusal: OpenAI's error body (Anthropic's routes override)."""
        return error_response(error, headers)

    async def authenticate(self) -> Principal:
        return await credentials.authenticate(
            self.request.headers.get("Authorization"), endpoint=self.endpoint
        )

    def json_body(self) -> dict[str, Any]:
        return parse_json_body(self.request.body)

    async def admit(self, principal, *, model: str, prompt_tokens: int, max_tokens: int):
        """Admit a one-shot request (its whole answer in one body); ``finish_admission``
        settles it. Streams use the generation use case instead."""
        self.admission = await admit(
            principal, model=model, prompt_tokens=prompt_tokens, max_tokens=max_tokens
        )
        self.response_headers = dict(self.admission.headers)
        return self.admission

    async def finish_admission(self, *, status: int, prompt_tokens: int = 0) -> None:
        """Settle the one-shot request's admission: once, on success or failure."""
        admission, self.admission = self.admission, None
        if admission is None:
            return
        await finish(
            admission,
            prompt_tokens=prompt_tokens,
            completion_tokens=0,
            cached_tokens=0,
            status=status,
            finish_reason=None,
            time_to_first_token=None,
            latency=time.monotonic() - self.started,
        )


def event_stream(body) -> StreamingHttpResponse:
    """A streaming SSE response of ``body`` (an SseBody)."""
    response = StreamingHttpResponse(body, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must pass tokens on as they come
    return response


def json_response(payload: dict, status: int = 200) -> JsonResponse:
    return JsonResponse(payload, status=status, json_dumps_params={"ensure_ascii": False})
