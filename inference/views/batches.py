"""/v1/batches: create a batch from an uploaded file, list, retrieve and cancel this tenant's."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from drf_spectacular.utils import extend_schema

from controlplane.batches import selectors, services
from controlplane.batches.representation import batch_object, page
from inference import credentials
from inference.batches import schema
from inference.errors import invalid_request
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import page_params

REQUIRED = ("input_file_id", "endpoint", "completion_window")


class BatchListView(AsyncApiView):
    """Create a batch, or list this tenant's batches (newest first)."""

    endpoint = "batches"

    @extend_schema(
        operation_id="createBatch",
        request={"application/json": schema.BATCH_CREATE},
        responses={200: schema.BATCH_FOUND},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        body = self.json_body()
        for name in REQUIRED:
            if not isinstance(body.get(name), str) or not body[name]:
                raise invalid_request(f"`{name}` is required (a string).", param=name)
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
        parameters=schema.PAGE_PARAMETERS,
        responses={200: schema.BATCH_LIST},
        tags=["OpenAI"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        after, limit, _ascending = page_params(request.GET, default_limit=20)
        batches = await sync_to_async(selectors.batch_list)(
            tenant_id=principal.tenant_id, after=after, limit=limit
        )
        return json_response(page(batches, limit=limit, render=batch_object))


class BatchDetailView(AsyncApiView):
    endpoint = "batches"

    @extend_schema(
        operation_id="retrieveBatch", responses={200: schema.BATCH_FOUND}, tags=["OpenAI"]
    )
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
        responses={200: schema.BATCH_FOUND},
        tags=["OpenAI"],
    )
    async def post(self, request, batch_id: str):
        principal = await self.authenticate()
        batch = await sync_to_async(services.batch_cancel)(
            tenant_id=principal.tenant_id, batch_id=batch_id
        )
        return json_response(batch_object(batch))
