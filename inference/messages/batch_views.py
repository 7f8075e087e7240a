"""/v1/messages/batches: Anthropic's Message Batches API (controlplane/batches/
message_batches.py runs it on the Batch API's worker): create, list, retrieve, cancel,
delete, and the results as JSON lines once the batch has ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from itertools import islice

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from controlplane.batches import message_batches as batches
from controlplane.batches.models import Batch
from inference.errors import invalid_request
from inference.generation.off_loop import off_loop
from inference.messages.views import HEADERS, AnthropicRoute
from inference.schemas.validation import parse_json_body
from inference.views.base import json_response
from inference.views.list_params import anthropic_limit, anthropic_page
from inference.zero_retention import refuse_keeping

BATCH = OpenApiResponse(description='{"id": "msgbatch_...", "type": "message_batch", ...}')
_LINES_PER_READ = 256


def _object(request, batch: Batch) -> dict:
    url = request.build_absolute_uri(f"/v1/messages/batches/{batch.id}/results")
    return batches.message_batch_object(batch, results_url=url)


class MessageBatchesView(AnthropicRoute):
    """Create a batch of Messages requests, or list this tenant's (newest first)."""

    @extend_schema(
        operation_id="createMessageBatch",
        request={"application/json": {"type": "object"}},
        parameters=HEADERS,
        responses={200: BATCH},
        tags=["Anthropic"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        refuse_keeping(principal, "a message batch keeps its requests and results")
        body = await off_loop(parse_json_body, self.request.body)  # up to 200 MB: not inline

        def create() -> dict:
            batch = batches.message_batch_create(
                tenant_id=principal.tenant_id,
                api_key_id=principal.key_id,
                requests=body.get("requests"),
            )
            return _object(request, batch)

        return json_response(await sync_to_async(create)())

    @extend_schema(
        operation_id="listMessageBatches",
        parameters=[
            *HEADERS,
            OpenApiParameter("limit", int, description="1 to 1000, default 20"),
            OpenApiParameter("after_id", str, description="the page after (older than) this"),
            OpenApiParameter("before_id", str, description="the page before (newer than) this"),
        ],
        responses={200: OpenApiResponse(description="A page of message batches.")},
        tags=["Anthropic"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        limit = anthropic_limit(request.GET)

        def page() -> dict:
            found, has_more = batches.message_batch_list(
                tenant_id=principal.tenant_id,
                before_id=request.GET.get("before_id"),
                after_id=request.GET.get("after_id"),
                limit=limit,
            )
            return anthropic_page([_object(request, b) for b in found], has_more=has_more)

        return json_response(await sync_to_async(page)())


class MessageBatchDetailView(AnthropicRoute):
    """One batch of this tenant, or its deletion once it has ended."""

    @extend_schema(
        operation_id="getMessageBatch",
        parameters=HEADERS,
        responses={200: BATCH},
        tags=["Anthropic"],
    )
    async def get(self, request, batch_id: str):
        principal = await self.authenticate()

        def read() -> dict:
            batch = batches.message_batch_get(tenant_id=principal.tenant_id, batch_id=batch_id)
            return _object(request, batch)

        return json_response(await sync_to_async(read)())

    @extend_schema(
        operation_id="deleteMessageBatch",
        parameters=HEADERS,
        responses={200: OpenApiResponse(description='{"id", "type": "message_batch_deleted"}')},
        tags=["Anthropic"],
    )
    async def delete(self, request, batch_id: str):
        principal = await self.authenticate()
        await sync_to_async(batches.message_batch_delete)(
            tenant_id=principal.tenant_id, batch_id=batch_id
        )
        return json_response({"id": batch_id, "type": "message_batch_deleted"})


class MessageBatchCancelView(AnthropicRoute):
    """Stop a batch: ``canceling``, then ``ended`` with the unrun requests ``canceled``."""

    @extend_schema(
        operation_id="cancelMessageBatch",
        request=None,
        parameters=HEADERS,
        responses={200: BATCH},
        tags=["Anthropic"],
    )
    async def post(self, request, batch_id: str):
        principal = await self.authenticate()

        def cancel() -> dict:
            batch = batches.message_batch_cancel(tenant_id=principal.tenant_id, batch_id=batch_id)
            return _object(request, batch)

        return json_response(await sync_to_async(cancel)())


async def _result_chunks(lines: Iterator[str]) -> AsyncIterator[bytes]:
    """The result lines, read (from storage) in a thread a few hundred at a time."""
    while chunk := await asyncio.to_thread(lambda: list(islice(lines, _LINES_PER_READ))):
        yield "".join(chunk).encode()


class MessageBatchResultsView(AnthropicRoute):
    """An ended batch's results: one JSON line per request."""

    @extend_schema(
        operation_id="getMessageBatchResults",
        parameters=HEADERS,
        responses={200: OpenApiResponse(description="JSON lines {custom_id, result}.")},
        tags=["Anthropic"],
    )
    async def get(self, request, batch_id: str):
        principal = await self.authenticate()
        batch = await sync_to_async(batches.message_batch_get)(
            tenant_id=principal.tenant_id, batch_id=batch_id
        )
        if batches.processing_status(batch) != "ended":
            raise invalid_request(
                f"Message batch {batch_id} has not ended yet; its results come when it has.",
            )
        lines = await sync_to_async(batches.message_batch_results)(batch)  # opens the files
        return StreamingHttpResponse(_result_chunks(lines), content_type="application/x-jsonl")
