"""POST /v1/rerank and /v2/rerank (Cohere's and Jina's shape) and POST /v1/score (vLLM's),
served by a pooling engine: an embeddings model or a cross-encoder."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference import scoring_use_case
from inference.schemas.scoring import RerankRequestSerializer, ScoreRequestSerializer
from inference.views.base import AsyncApiView, json_response


def _rerank_schema(operation_id: str):
    return extend_schema(
        operation_id=operation_id,
        request=RerankRequestSerializer,
        responses={
            200: OpenApiResponse(
                description="{id, model, results: [{index, relevance_score, document?}], "
                "usage, meta}"
            )
        },
        tags=["Rerank and score"],
    )


class RerankView(AsyncApiView):
    """Documents ordered by relevance to a query (Cohere v1, Jina and vLLM clients)."""

    endpoint = "rerank"
    api_version = "1"

    @_rerank_schema("rerank")
    async def post(self, request):
        return await self._rerank()

    async def _rerank(self):
        principal = await self.authenticate()
        body, self.response_headers = await scoring_use_case.rerank(
            principal, self.json_body(), api_version=self.api_version, started=self.started
        )
        return json_response(body)


class RerankV2View(RerankView):
    """The same for Cohere's v2 client (``cohere.ClientV2``), which posts to /v2/rerank:
    documents are returned only when ``return_documents`` asks for them."""

    api_version = "2"

    @_rerank_schema("rerankV2")
    async def post(self, request):
        return await self._rerank()


class ScoreView(AsyncApiView):
    """One relevance score per (text_1, text_2) pair, as vLLM's /v1/score answers."""

    endpoint = "score"

    @extend_schema(
        operation_id="score",
        request=ScoreRequestSerializer,
        responses={
            200: OpenApiResponse(
                description="{object: list, data: [{index, object: score, score}], usage}"
            )
        },
        tags=["Rerank and score"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        body, self.response_headers = await scoring_use_case.score(
            principal, self.json_body(), started=self.started
        )
        return json_response(body)
