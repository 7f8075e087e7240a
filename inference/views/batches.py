"""/v1/batches: create a batch from an uploaded file, list, retrieve and cancel this tenant's."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from drf_spectacular.utils import OpenApiResponse, extend_schema

from controlplane.batches import selectors, services
from controlplane.batches.representation import batch_object
from controlplane.common.cursor_pages import page_object
from inference import credentials
from inference.schemas.batches import BatchCreateSerializer, BatchObjectSerializer
from inference.schemas.pages import PAGE_PARAMETERS, page_of
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import page_params
from inference.zero_retention import refuse_keeping

BATCH_FOUND = OpenApiResponse(BatchObjectSerializer, description="A batch of your tenant.")


class BatchListView(AsyncApiView):
    """Create a batch, or list this tenant's batches (newest first)."""

    endpoint = "batches"

    @extend_schema(
        operation_id="createBatch",
        request=BatchCreateSerializer,
        responses={200: BATCH_FOUND},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        refuse_keeping(principal, "the Batch API keeps its requests and answers in files")
        body = validate_body(BatchCreateSerializer, self.json_body())
        # The key must be allowed the endpoint its lines will call (403 otherwise), now and
        # not line by line later.
        await credentials.authenticate(
            request.headers.get("Authorization"), endpoint=body["endpoint"]
        )
        batch = await sync_to_async(services.batch_create)(
            tenant_id=principal.tenant_id,
            api_key_id=principal.key_id,
            input_file_id=body["input_file_id"],
            endpoint=body["endpoint"],
            completion_window=body["completion_window"],
            metadata=body.get("metadata"),
        )
        return json_response(batch_object(batch))

    @extend_schema(
        operation_id="listBatches",
        parameters=PAGE_PARAMETERS,
        responses={
            200: OpenApiResponse(
                page_of(BatchObjectSerializer, "BatchList"), description="Your tenant's batches."
            )
        },
        tags=["OpenAI"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        after, limit, _ascending = page_params(request.GET, default_limit=20)
        batches = await sync_to_async(selectors.batch_list)(
            tenant_id=principal.tenant_id, after=after, limit=limit
        )
        return json_response(page_object(batches, limit=limit, render=batch_object))


class BatchDetailView(AsyncApiView):
    endpoint = "batches"

    @extend_schema(operation_id="retrieveBatch", responses={200: BATCH_FOUND}, tags=["OpenAI"])
    async def get(self, request, batch_id: str):
        principal = await self.authenticate()
        batch = await sync_to_async(selectors.batch_get)(
            tenant_id=principal.tenant_id, batch_id=batch_id
        )
        return json_response(batch_object(batch))


class BatchCancelView(AsyncApiView):
    endpoint = "batches"

    @extend_schema(
        operation_id="cancelBatch",
        request=None,
        responses={200: BATCH_FOUND},
        tags=["OpenAI"],
    )
    async def post(self, request, batch_id: str):
        principal = await self.authenticate()
        batch = await sync_to_async(services.batch_cancel)(
            tenant_id=principal.tenant_id, batch_id=batch_id
        )
        return json_response(batch_object(batch))
