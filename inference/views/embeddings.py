"""POST /v1/embeddings, served by a pooling engine (e.g. all-MiniLM-L6-v2)."""

from __future__ import annotations

import base64
from array import array

from drf_spectacular.utils import OpenApiResponse, extend_schema

from controlplane.tenants.admission import check_request_limits
from inference.catalog import embedding_max_length, embedding_tokenizer_for, resolve_model
from inference.embeddings_client import EmbeddingsClient, EmbeddingTokenizer
from inference.engine_client import EngineClient, EngineUnavailable
from inference.errors import ApiError, invalid_request
from inference.prompts import off_loop
from inference.schemas.embeddings import EmbeddingRequestSerializer
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response


def _encode_inputs(tokenizer: EmbeddingTokenizer, prompts, max_length: int) -> list[list[int]]:
    inputs = []
    for index, prompt in enumerate(prompts):
        ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not isinstance(prompt, str) and max(ids) >= tokenizer.vocab_size:
            raise invalid_request(
                f"input[{index}] has a token id out of vocabulary ({tokenizer.vocab_size}).",
                param="input",
            )
        if len(ids) > max_length:
            raise ApiError(
                f"This model's maximum input length is {max_length} tokens. However, "
                f"input[{index}] has {len(ids)} tokens. Please shorten it.",
                param="input",
                code="context_length_exceeded",
            )
        inputs.append(ids)
    return inputs


def _embedding_item(index: int, vector: bytes, encoding_format: str) -> dict:
    if encoding_format == "base64":  # little-endian float32, as OpenAI's base64 format is
        data = base64.b64encode(vector).decode("ascii")
    else:
        data = array("f", vector).tolist()
    return {"object": "embedding", "index": index, "embedding": data}


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
        body = validate_body(EmbeddingRequestSerializer, self.json_body())
        await check_request_limits(principal, model=body["model"])
        entry = await resolve_model(principal, body["model"])
        if not entry.is_embedding:
            raise invalid_request(f"`{entry.name}` is not an embedding model.", param="model")
        tokenizer = embedding_tokenizer_for(entry)
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions != tokenizer.dimensions:
            raise invalid_request(
                f"This model makes {tokenizer.dimensions}-dimensional embeddings and cannot "
                f"shorten them to {dimensions}.",
                param="dimensions",
            )
        inputs = await off_loop(
            _encode_inputs, tokenizer, body["input"], embedding_max_length(entry)
        )
        num_tokens = sum(len(ids) for ids in inputs)
        if not await EngineClient.for_process().is_model_ready(entry.name):
            raise EngineUnavailable(f"No embedding engine is serving `{entry.name}` right now.")
        await self.admit(principal, model=entry.name, prompt_tokens=num_tokens, max_tokens=0)
        reply = await EmbeddingsClient.for_process().embed(model=entry.name, inputs=inputs)
        await self.finish_admission(status=200, prompt_tokens=num_tokens)
        encoding_format = body.get("encoding_format", "float")
        return json_response(
            {
                "object": "list",
                "data": [
                    _embedding_item(i, vector, encoding_format)
                    for i, vector in enumerate(reply.vectors)
                ],
                "model": entry.name,
                "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
            }
        )
