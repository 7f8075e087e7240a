"""The embeddings use case, for POST /v1/embeddings and Batch API lines alike: validate, check
limits, encode, admit, ask the pooling engine, settle the admission once, format the reply."""

from __future__ import annotations

import base64
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from controlplane.access.admission import finish
from controlplane.access.principals import Principal
from engine.pooling.messages import EmbedReply
from inference.catalog import (
    ModelEntry,
    embedding_max_length,
    embedding_tokenizer_for,
    resolve_model,
)
from inference.errors import ApiError, error_from_exception, invalid_request
from inference.generation.off_loop import off_loop
from inference.limits import admit, check_request_limits
from inference.schemas.embeddings import EmbeddingRequestSerializer
from inference.schemas.validation import validate_body
from inference.transport import (
    EmbeddingsClient,
    EmbeddingTokenizer,
    EngineClient,
)


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


async def run_pooling(
    principal: Principal,
    entry: ModelEntry,
    inputs: list[list[int]],
    *,
    token_type_ids: list[list[int]] = (),
    started: float,
    batch_id: str = "",
    end_user: str = "",
) -> tuple[EmbedReply, dict[str, str]]:
    """Admit ``inputs`` (their tokens are the prompt tokens), have a pooling engine of
    ``entry`` embed (or score) them, and settle the admission once, whatever happens: the
    engine's reply and the x-ratelimit-* headers. Shared by embeddings, rerank and score."""
    # A model scaled to zero is woken here, before the admission, as for generation.
    await EngineClient.for_process().capacity.check_served(entry.name)
    num_tokens = sum(len(ids) for ids in inputs)
    admission = await admit(
        principal, model=entry.name, prompt_tokens=num_tokens, max_tokens=0, end_user=end_user
    )
    admission.batch_id = batch_id
    status = 200
    try:
        reply = await EmbeddingsClient.for_process().embed(
            model=entry.name, inputs=inputs, token_type_ids=token_type_ids
        )
    except BaseException as exc:
        status = error_from_exception(exc).status if isinstance(exc, Exception) else 499
        raise
    finally:
        await finish(
            admission,
            prompt_tokens=num_tokens if status == 200 else 0,
            completion_tokens=0,
            cached_tokens=0,
            status=status,
            finish_reason=None,
            time_to_first_token=None,
            latency=time.monotonic() - started,
            end_user=end_user,
        )
    return reply, dict(admission.headers)


@dataclass
class EmbeddingResult:
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)  # x-ratelimit-* of the admission


async def create_embeddings(
    principal: Principal,
    raw_body: dict[str, Any],
    *,
    started: float | None = None,
    batch_id: str = "",
) -> EmbeddingResult:
    """The ``list`` of embeddings for ``raw_body``; raises ApiError (or an engine error) when
    refused, after settling whatever was admitted."""
    started = time.monotonic() if started is None else started
    body = validate_body(EmbeddingRequestSerializer, raw_body)
    end_user = body.get("user") or ""
    await check_request_limits(principal, model=body["model"], end_user=end_user)
    entry = await resolve_model(principal, body["model"])
    if not entry.is_embedding:
        raise invalid_request(f"`{entry.name}` is not an embedding model.", param="model")
    if entry.is_cross_encoder:
        raise invalid_request(
            f"`{entry.name}` is a cross-encoder (reranker): it scores pairs on /v1/rerank and "
            "/v1/score, and makes no embeddings.",
            param="model",
        )
    tokenizer = embedding_tokenizer_for(entry)
    dimensions = body.get("dimensions")
    if dimensions is not None and dimensions != tokenizer.dimensions:
        raise invalid_request(
            f"This model makes {tokenizer.dimensions}-dimensional embeddings and cannot "
            f"shorten them to {dimensions}.",
            param="dimensions",
        )
    inputs = await off_loop(_encode_inputs, tokenizer, body["input"], embedding_max_length(entry))
    num_tokens = sum(len(ids) for ids in inputs)
    reply, headers = await run_pooling(
        principal,
        entry,
        inputs,
        started=started,
        batch_id=batch_id,
        end_user=end_user,
    )
    encoding_format = body.get("encoding_format", "float")
    payload = {
        "object": "list",
        "data": [
            _embedding_item(i, vector, encoding_format) for i, vector in enumerate(reply.vectors)
        ],
        "model": entry.name,
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
    }
    return EmbeddingResult(payload, headers)
