"""Rerank and score, for POST /v1/rerank (and /v2/rerank) and /v1/score: how relevant each
document is to a query, by a pooling engine, metered like embeddings.

An embeddings model (bi-encoder) embeds the query and the documents each on its own and scores
a pair by the cosine of the two vectors; a cross-encoder reads each (query, document) pair as
one input and scores it with its classification head. Either way the prompt tokens are the
tokens the engine reads, and the request is admitted, limited and recorded like /v1/embeddings.
"""

from __future__ import annotations

import math
import time
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any

from controlplane.access.principals import Principal
from inference.catalog import (
    ModelEntry,
    embedding_max_length,
    embedding_tokenizer_for,
    resolve_model,
)
from inference.embedding_use_case import run_pooling
from inference.errors import ApiError, invalid_request
from inference.generation.off_loop import off_loop
from inference.limits import check_request_limits
from inference.schemas.scoring import RerankRequestSerializer, ScoreRequestSerializer
from inference.schemas.validation import validate_body
from inference.transport import EmbeddingTokenizer

# Cohere bills a search unit per query and up to 100 documents; reported, not charged.
DOCUMENTS_PER_SEARCH_UNIT = 100


@dataclass(frozen=True)
class PairRequest:
    """What rerank and score ask of a model: the texts of each side, the pairs to score
    (indexes into them), and what to do with inputs longer than the model takes."""

    firsts: list[str]
    seconds: list[str]
    pairs: list[tuple[int, int]]
    params: tuple[str, str]  # the request fields the two sides come from, for errors
    cut_documents: bool  # cut second texts to fit; otherwise one too long is a 400
    cut_queries: bool = False  # cut first texts too (a bi-encoder reads them alone)
    max_document_tokens: int | None = None  # Cohere's max_tokens_per_doc
    max_input_tokens: int | None = None  # vLLM's truncate_prompt_tokens


@dataclass
class PairScores:
    scores: list[float]  # one per pair, in pair order
    num_tokens: int
    model: str
    headers: dict[str, str] = field(default_factory=dict)  # x-ratelimit-* of the admission


@dataclass(frozen=True)
class _EngineInputs:
    inputs: list[list[int]]
    token_type_ids: list[list[int]]


def _too_long(param: str, index: int | None, num_tokens: int, limit: int) -> ApiError:
    where = param if index is None else f"{param}[{index}]"
    return ApiError(
        f"This model's maximum input length is {limit} tokens. However, {where} has "
        f"{num_tokens} tokens. Please shorten it"
        + (", or set `truncate_prompt_tokens`." if param in ("text_1", "text_2") else "."),
        param=param,
        code="context_length_exceeded",
    )


def _where(texts: list[str], index: int) -> int | None:
    """The index an error names: none for rerank's one query (a string, not a list)."""
    return None if len(texts) == 1 and index == 0 else index


def _bi_encoder_inputs(
    tokenizer: EmbeddingTokenizer, request: PairRequest, limit: int
) -> _EngineInputs:
    """Every text on its own (firsts, then seconds), each cut or refused at ``limit``."""
    room = limit - tokenizer.num_special_tokens(pair=False)
    inputs = []
    for side, texts in enumerate((request.firsts, request.seconds)):
        cut = request.cut_documents if side else request.cut_queries
        for index, encoding in enumerate(tokenizer.encode_segments(texts)):
            if side and request.max_document_tokens is not None:
                encoding.truncate(request.max_document_tokens)
            if len(encoding.ids) > room:
                if not cut:
                    num_tokens = len(encoding.ids) + limit - room
                    raise _too_long(request.params[side], _where(texts, index), num_tokens, limit)
                encoding.truncate(max(room, 0))
            inputs.append(tokenizer.with_special_tokens(encoding)[0])
    return _EngineInputs(inputs, [])


def _cross_encoder_inputs(
    tokenizer: EmbeddingTokenizer, request: PairRequest, limit: int
) -> _EngineInputs:
    """One input per pair, [CLS] first [SEP] second [SEP]; the second text is cut to fit."""
    specials = tokenizer.num_special_tokens(pair=True)
    firsts = tokenizer.encode_segments(request.firsts)
    seconds = tokenizer.encode_segments(request.seconds)
    for index, encoding in enumerate(firsts):
        if len(encoding.ids) + specials > limit:
            num_tokens = len(encoding.ids) + specials
            raise _too_long(request.params[0], _where(request.firsts, index), num_tokens, limit)
    inputs, token_type_ids = [], []
    for first_index, second_index in request.pairs:
        first, second = firsts[first_index], seconds[second_index]
        room = limit - specials - len(first.ids)
        if request.max_document_tokens is not None:
            room = min(room, request.max_document_tokens)
        if len(second.ids) > room:
            if not request.cut_documents and len(second.ids) + specials + len(first.ids) > limit:
                num_tokens = len(second.ids) + specials + len(first.ids)
                raise _too_long(request.params[1], second_index, num_tokens, limit)
            second.truncate(room)  # each second text is in one pair: cut in place
        ids, types = tokenizer.with_special_tokens(first, second)
        inputs.append(ids)
        token_type_ids.append(types)
    return _EngineInputs(inputs, token_type_ids)


def _cosine(a: array, b: array) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norms if norms else 0.0


def _scores(entry: ModelEntry, request: PairRequest, vectors: list[bytes]) -> list[float]:
    if entry.is_cross_encoder:
        return [array("f", vector)[0] for vector in vectors]
    decoded = [array("f", vector) for vector in vectors]
    num_firsts = len(request.firsts)
    return [_cosine(decoded[i], decoded[num_firsts + j]) for i, j in request.pairs]


async def score_pairs(
    principal: Principal, model: str, request: PairRequest, *, started: float
) -> PairScores:
    """The relevance score of every pair of ``request`` by ``model``; raises ApiError (or an
    engine error) when refused, after settling whatever was admitted."""
    await check_request_limits(principal, model=model)
    entry = await resolve_model(principal, model)
    if not entry.is_embedding:
        raise invalid_request(
            f"`{entry.name}` is a generation model; rerank and score need an embeddings model "
            "or a cross-encoder.",
            param="model",
        )
    tokenizer = embedding_tokenizer_for(entry)
    limit = embedding_max_length(entry)
    if request.max_input_tokens is not None and request.max_input_tokens > 0:
        limit = min(limit, request.max_input_tokens)
    encode = _cross_encoder_inputs if entry.is_cross_encoder else _bi_encoder_inputs
    engine_inputs = await off_loop(encode, tokenizer, request, limit)
    reply, headers = await run_pooling(
        principal,
        entry,
        engine_inputs.inputs,
        token_type_ids=engine_inputs.token_type_ids,
        started=started,
    )
    return PairScores(
        scores=_scores(entry, request, reply.vectors),
        num_tokens=sum(len(ids) for ids in engine_inputs.inputs),
        model=entry.name,
        headers=headers,
    )


def _ranked(scores: list[float], top_n: int | None) -> list[int]:
    """Document indexes, most relevant first (ties in request order), cut to ``top_n``."""
    order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
    return order[:top_n] if top_n else order


async def rerank(
    principal: Principal, raw_body: dict[str, Any], *, api_version: str, started: float
) -> tuple[dict[str, Any], dict[str, str]]:
    """The rerank response body for ``raw_body`` and the admission's headers. ``api_version``
    "1" (Cohere v1, Jina, vLLM: documents returned unless asked not to) or "2" (Cohere v2:
    only when asked)."""
    body = validate_body(RerankRequestSerializer, raw_body)
    request = PairRequest(
        firsts=[body["query"]],
        seconds=body["texts"],
        pairs=[(0, index) for index in range(len(body["texts"]))],
        params=("query", "documents"),
        cut_documents=True,
        max_document_tokens=body.get("max_tokens_per_doc"),
    )
    scored = await score_pairs(principal, body["model"], request, started=started)
    return_documents = body.get("return_documents")
    if return_documents is None:
        return_documents = api_version == "1"
    results = []
    for index in _ranked(scored.scores, body.get("top_n")):
        result: dict[str, Any] = {"index": index, "relevance_score": scored.scores[index]}
        if return_documents:
            document = body["documents"][index]
            result["document"] = {"text": document} if isinstance(document, str) else document
        results.append(result)
    num_documents = len(body["documents"])
    payload = {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": scored.model,
        "results": results,
        "usage": {"prompt_tokens": scored.num_tokens, "total_tokens": scored.num_tokens},
        "meta": {
            "api_version": {"version": api_version},
            "billed_units": {"search_units": -(-num_documents // DOCUMENTS_PER_SEARCH_UNIT)},
            "tokens": {"input_tokens": scored.num_tokens, "output_tokens": 0},
        },
    }
    return payload, scored.headers


async def score(
    principal: Principal, raw_body: dict[str, Any], *, started: float
) -> tuple[dict[str, Any], dict[str, str]]:
    """vLLM's score response body for ``raw_body`` (one score per pair) and the headers."""
    body = validate_body(ScoreRequestSerializer, raw_body)
    firsts, seconds = body["text_1"], body["text_2"]
    truncate = body.get("truncate_prompt_tokens")
    request = PairRequest(
        firsts=firsts,
        seconds=seconds,
        pairs=[(0 if len(firsts) == 1 else index, index) for index in range(len(seconds))],
        params=("text_1", "text_2"),
        cut_documents=truncate is not None,
        cut_queries=truncate is not None,
        max_input_tokens=truncate,
    )
    scored = await score_pairs(principal, body["model"], request, started=started)
    payload = {
        "id": f"score-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": scored.model,
        "data": [
            {"index": index, "object": "score", "score": value}
            for index, value in enumerate(scored.scores)
        ],
        "usage": {
            "prompt_tokens": scored.num_tokens,
            "total_tokens": scored.num_tokens,
            "completion_tokens": 0,
        },
    }
    return payload, scored.headers
