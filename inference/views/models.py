"""GET /v1/models and /v1/models/{id}: the models this key's tenant may use."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference.catalog import ModelEntry, resolve_model, visible_models
from inference.views.base import AsyncApiView, json_response


def _model(entry: ModelEntry) -> dict:
    """OpenAI's model object, with vLLM's root, parent (an adapter's base) and max_model_len."""
    return {
        "id": entry.name,
        "object": "model",
        "created": entry.created,
        "owned_by": "llm-platform",
        "root": entry.name,
        "parent": entry.parent,
        "max_model_len": entry.max_model_len,
    }


class ModelListView(AsyncApiView):
    """The models this API key may use."""

    endpoint = "models"

    @extend_schema(
        operation_id="listModels",
        responses={200: OpenApiResponse(description="{object: list, data: [model]}")},
        tags=["OpenAI"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        models = await visible_models(principal, with_adapters=True)
        return json_response({"object": "list", "data": [_model(m) for m in models]})


class ModelDetailView(AsyncApiView):
    """One model, if this API key may use it (404 otherwise)."""

    endpoint = "models"

    @extend_schema(
        operation_id="retrieveModel",
        responses={200: OpenApiResponse(description="a model object"), 404: None},
        tags=["OpenAI"],
    )
    async def get(self, request, model_id: str):
        principal = await self.authenticate()
        return json_response(_model(await resolve_model(principal, model_id, with_adapters=True)))
