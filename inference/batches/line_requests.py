"""One batch line through the API's own use cases: the same validation, limits, usage and
formatters as the HTTP endpoint, so a line's ``body`` is what the endpoint would have answered.

Usage is recorded with the batch's id, and generations go to the engine at the batch priority.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from controlplane.access.principals import AccessError, Principal
from inference.embedding_use_case import create_embeddings
from inference.errors import error_from_exception, invalid_request
from inference.generation.planning import prepare_chat, prepare_completion
from inference.generation.use_case import Generation
from inference.messages.planning import prepare_messages
from inference.responses.planning import prepare_response
from inference.stored_answers import whole_answer

PLANNERS = {
    "/v1/chat/completions": prepare_chat,
    "/v1/completions": prepare_completion,
    "/v1/responses": prepare_response,
    "/v1/messages": prepare_messages,  # Anthropic's Message Batches API (message_batches.py)
}


@dataclass(frozen=True)
class LineAnswer:
    """What the endpoint answered: a status, a request id and OpenAI's body (or error body)."""

    status_code: int
    request_id: str
    body: dict[str, Any]
    retry_after: float | None = None  # a refusal worth waiting out (rate limit, engine busy)

    @property
    def ok(self) -> bool:
        return self.status_code == 200


async def _generate(endpoint: str, principal: Principal, body: dict, batch_id: str) -> dict:
    if body.get("stream"):
        raise invalid_request("Batch requests cannot stream; leave `stream` unset.", param="stream")
    if body.get("background"):  # a batch runs in the background already
        raise invalid_request(
            "Batch lines run in the background already; leave `background` unset.",
            param="background",
        )
    generation = await Generation.admit(PLANNERS[endpoint], principal, body)
    generation.admission.batch_id = batch_id
    # Behind interactive requests in engines that schedule by priority (lower runs first).
    generation.plan.priority = settings.BATCH_ENGINE_PRIORITY
    generation.plan.service_class = "batch"  # after every interactive request (fair policy)
    await generation.open()
    return await whole_answer(generation)  # stored, as the endpoint stores it


def _retry_after(exc: Exception) -> float | None:
    """Seconds to wait before trying again, for refusals that pass: a per-minute limit or the
    concurrency limit (429, not the monthly budget), a busy or absent engine (503)."""
    error = error_from_exception(exc)
    if isinstance(exc, AccessError) and error.code == "insufficient_quota":
        return None
    if error.status not in (429, 503):
        return None
    headers = {k.lower(): v for k, v in error.headers.items()}
    try:
        return max(0.5, float(headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


async def answer_line(
    endpoint: str, principal: Principal, body: dict[str, Any], *, batch_id: str
) -> LineAnswer:
    """Run one line; never raises (but for cancellation): errors become error answers."""
    request_id = f"req_{secrets.token_hex(12)}"
    try:
        if endpoint == "/v1/embeddings":
            result = (await create_embeddings(principal, body, batch_id=batch_id)).body
        else:
            result = await _generate(endpoint, principal, body, batch_id)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = error_from_exception(exc)
        return LineAnswer(error.status, request_id, error.body(), _retry_after(exc))
    return LineAnswer(200, request_id, result)
