"""GET /v1/models and /v1/models/{id}: the models this key's tenant may use.

The same paths answer Anthropic's SDK in Anthropic's shapes: a request with an
``anthropic-version`` header (which that SDK always sends, and OpenAI's never does) takes its
key from ``x-api-key`` too, lists ``{"type": "model", "id", "display_name", "created_at"}``
objects paged by ``after_id``/``before_id``/``limit``, and gets Anthropic's error body."""

from __future__ import annotations

from datetime import UTC, datetime

from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference import credentials
from inference.catalog import ModelEntry, resolve_model, visible_models
from inference.errors import error_response
from inference.messages.errors import anthropic_error
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import anthropic_limit, anthropic_page


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


def _anthropic_model(entry: ModelEntry) -> dict:
    """Anthropic's ModelInfo for ``entry``."""
    created = datetime.fromtimestamp(entry.created, tz=UTC)
    return {
        "type": "model",
        "id": entry.name,
        "display_name": entry.name,
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "max_input_tokens": entry.max_model_len,
        "max_tokens": entry.max_model_len,
        "lifecycle": "active",
    }


def _anthropic_page(models: list[dict], query) -> dict:
    """Anthropic's page: ``limit`` models after ``after_id`` or before ``before_id``."""
    limit = anthropic_limit(query)
    ids = [model["id"] for model in models]
    after, before = query.get("after_id"), query.get("before_id")
    if before:
        end = ids.index(before) if before in ids else 0
        page, has_more = models[max(0, end - limit) : end], end - limit > 0
    else:
        start = ids.index(after) + 1 if after in ids else (len(ids) if after else 0)
        page, has_more = models[start : start + limit], start + limit < len(models)
    return anthropic_page(page, has_more=has_more)


class ModelsRoute(AsyncApiView):
    endpoint = "models"

    @property
    def anthropic(self) -> bool:
        return "anthropic-version" in self.request.headers

    async def authenticate(self):
        if not self.anthropic:
            return await super().authenticate()
        headers = self.request.headers
        return await credentials.authenticate_x_api_key(
            headers.get("x-api-key"), headers.get("Authorization"), endpoint=self.endpoint
        )

    def error_response(self, error, headers=None):
        if not self.anthropic:
            return super().error_response(error, headers)
        return error_response(error, headers, body=anthropic_error(error))


class ModelListView(ModelsRoute):
    """The models this API key may use."""

    @extend_schema(
        operation_id="listModels",
        responses={200: OpenApiResponse(description="{object: list, data: [model]}")},
        tags=["OpenAI"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        models = await visible_models(principal, with_adapters=True)
        if self.anthropic:
            return json_response(
                _anthropic_page([_anthropic_model(m) for m in models], request.GET)
            )
        return json_response({"object": "list", "data": [_model(m) for m in models]})


class ModelDetailView(ModelsRoute):
    """One model, if this API key may use it (404 otherwise)."""

    @extend_schema(
        operation_id="retrieveModel",
        responses={200: OpenApiResponse(description="a model object"), 404: None},
        tags=["OpenAI"],
    )
    async def get(self, request, model_id: str):
        principal = await self.authenticate()
        entry = await resolve_model(principal, model_id, with_adapters=True)
        return json_response(_anthropic_model(entry) if self.anthropic else _model(entry))
