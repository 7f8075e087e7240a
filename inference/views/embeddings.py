"""POST /v1/embeddings, served by a pooling engine (e.g. all-MiniLM-L6-v2)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference.embedding_use_case import create_embeddings
from inference.schemas.embeddings import EmbeddingRequestSerializer
from inference.views.base import AsyncApiView, json_response


class EmbeddingsView(AsyncApiView):
    """Embedding vectors of one or more inputs (float or base64 encoded)."""

    endpoint = "embeddings"

    @extend_schema(
        operation_id="createEmbedding",
        request=EmbeddingRequestSerializer,
        responses={200: OpenApiResponse(description="{object: list, data: [embedding], usage}")},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        result = await create_embeddings(principal, self.json_body(), started=self.started)
        self.response_headers = result.headers
        return json_response(result.body)
