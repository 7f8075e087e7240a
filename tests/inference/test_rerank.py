"""/v1/rerank, /v2/rerank and /v1/score against the served stack, with all-MiniLM-L6-v2 as a
bi-encoder: the official cohere SDK (v1 and v2 clients) ranks the relevant document first,
and a score is the cosine of the two /v1/embeddings vectors."""

from __future__ import annotations

import math
import time

import cohere
import httpx
import pytest

pytestmark = pytest.mark.slow

QUERY = "What is the capital of the United States?"
DOCUMENTS = [
    "Carson City is the capital city of the American state of Nevada.",
    "Washington, D.C. is the capital of the United States, a federal district.",
    "Capital punishment has existed in the United States since before it was a country.",
    "My cat likes to sleep on the warm kitchen floor.",
]
RELEVANT = 1


@pytest.fixture
def minilm(api_platform, pooling_engine):
    return api_platform


def _post(platform, path: str, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or platform.api_key}"}
    return httpx.post(f"{platform.base_url}{path}", json=body, headers=headers, timeout=60)


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_cohere_v1_client_ranks_the_relevant_document_first(minilm):
    co = cohere.Client(api_key=minilm.api_key, base_url=minilm.base_url, max_retries=0)
    # Strings and objects alike; an object's other fields come back with it (Cohere v1).
    documents = [*DOCUMENTS[:3], {"text": DOCUMENTS[3], "id": "cat-7"}]
    reply = co.rerank(model=minilm.embed_model, query=QUERY, documents=documents)
    ranked = [result.index for result in reply.results]
    assert ranked[0] == RELEVANT and sorted(ranked) == [0, 1, 2, 3]
    scores = [result.relevance_score for result in reply.results]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1] + 0.2
    # Documents are returned unless asked not to, on /v1/rerank.
    assert reply.results[0].document.text == DOCUMENTS[RELEVANT]
    cat = next(result for result in reply.results if result.index == 3)
    assert cat.document.text == DOCUMENTS[3] and cat.document.id == "cat-7"
    assert reply.meta.api_version.version == "1" and reply.meta.billed_units.search_units == 1

    top = co.rerank(
        model=minilm.embed_model, query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=False
    )
    assert [r.index for r in top.results] == ranked[:2] and top.results[0].document is None


def test_cohere_v2_client_ranks_on_v2_rerank(minilm):
    co = cohere.ClientV2(api_key=minilm.api_key, base_url=minilm.base_url, max_retries=0)
    reply = co.rerank(model=minilm.embed_model, query=QUERY, documents=DOCUMENTS, top_n=3)
    assert reply.results[0].index == RELEVANT and len(reply.results) == 3
    assert reply.meta.api_version.version == "2"
    assert "document" not in reply.results[0].model_dump(exclude_none=True)  # v2's shape
    assert reply.meta.tokens.input_tokens > 0


def test_score_is_the_cosine_of_the_embeddings(minilm):
    vectors = [
        item.embedding
        for item in minilm.sdk()
        .embeddings.create(model=minilm.embed_model, input=[QUERY, *DOCUMENTS[:2]])
        .data
    ]
    one_to_many = _post(
        minilm, "/v1/score", {"model": minilm.embed_model, "text_1": QUERY, "text_2": DOCUMENTS[:2]}
    )
    assert one_to_many.status_code == 200, one_to_many.text
    body = one_to_many.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    assert [d["object"] for d in body["data"]] == ["score", "score"]
    expected = [_cosine(vectors[0], vectors[1]), _cosine(vectors[0], vectors[2])]
    assert [d["score"] for d in body["data"]] == pytest.approx(expected, abs=1e-5)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 20

    pairwise = _post(
        minilm,
        "/v1/score",
        {"model": minilm.embed_model, "text_1": [QUERY, QUERY], "text_2": DOCUMENTS[:2]},
    ).json()
    assert [d["score"] for d in pairwise["data"]] == pytest.approx(expected, abs=1e-5)
    # The rerank of the same documents reports the same numbers.
    reranked = _post(
        minilm,
        "/v1/rerank",
        {"model": minilm.embed_model, "query": QUERY, "documents": DOCUMENTS[:2]},
    ).json()
    by_index = {r["index"]: r["relevance_score"] for r in reranked["results"]}
    assert [by_index[0], by_index[1]] == pytest.approx(expected, abs=1e-5)


def _count(platform, text: str) -> int:
    """Tokens of ``text`` alone, special ones included, as /tokenize counts them."""
    body = {"model": platform.embed_model, "prompt": text}
    return _post(platform, "/tokenize", body).json()["count"]


def test_rerank_is_metered_like_embeddings(minilm):
    before = len(minilm.usage_events())
    long_document = "the capital " * 400  # far past the model's 256 tokens: cut, not refused
    reply = _post(
        minilm,
        "/v1/rerank",
        {"model": minilm.embed_model, "query": QUERY, "documents": [DOCUMENTS[1], long_document]},
    )
    assert reply.status_code == 200, reply.text
    used = reply.json()["usage"]["prompt_tokens"]
    query, document = _count(minilm, QUERY), _count(minilm, DOCUMENTS[1])
    # The query, the document, and the long one cut to the model's 256 tokens.
    assert used == reply.json()["meta"]["tokens"]["input_tokens"] == query + document + 256
    capped = _post(
        minilm,
        "/v1/rerank",
        {
            "model": minilm.embed_model,
            "query": QUERY,
            "documents": [DOCUMENTS[1], long_document],
            "max_tokens_per_doc": 10,
        },
    ).json()
    assert capped["usage"]["prompt_tokens"] == query + 12 + 12  # documents: 10 + 2 special
    deadline = time.monotonic() + 5
    while len(events := minilm.usage_events()[before:]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [(e.model, e.prompt_tokens, e.completion_tokens, e.status) for e in events] == [
        (minilm.embed_model, used, 0, 200),
        (minilm.embed_model, query + 24, 0, 200),
    ]


def test_bad_requests_get_openai_errors(minilm):
    model = minilm.embed_model

    def error(path: str, body: dict, status: int = 400, key: str | None = None) -> dict:
        response = _post(minilm, path, body, key)
        assert response.status_code == status, response.text
        return response.json()["error"]

    empty = error("/v1/rerank", {"model": model, "query": QUERY, "documents": []})
    assert empty["param"] == "documents" and "must not be empty" in empty["message"]
    many = error("/v1/rerank", {"model": model, "query": QUERY, "documents": ["a"] * 1001})
    assert many["param"] == "documents" and "at most 1000" in many["message"]
    no_text = error("/v2/rerank", {"model": model, "query": QUERY, "documents": ["a", {"t": 1}]})
    assert no_text["param"] == "documents[1]"
    unknown = error("/v1/rerank", {"model": "nope", "query": QUERY, "documents": ["a"]}, 404)
    assert unknown["code"] == "model_not_found"
    chat = error("/v1/rerank", {"model": minilm.chat_model, "query": QUERY, "documents": ["a"]})
    assert chat["param"] == "model" and "generation model" in chat["message"]
    long_query = error("/v1/rerank", {"model": model, "query": "word " * 300, "documents": ["a"]})
    assert long_query["param"] == "query" and long_query["code"] == "context_length_exceeded"
    # The tenant granted only the chat model does not see MiniLM at all.
    hidden = {"model": model, "text_1": "a", "text_2": "b"}
    assert error("/v1/score", hidden, 404, key=minilm.limited_key)["code"] == "model_not_found"
    # /v1/score refuses an input the model cannot take, unless told to cut it.
    too_long = {"model": model, "text_1": "a", "text_2": ["b", "word " * 300]}
    assert error("/v1/score", too_long)["param"] == "text_2"
    cut = _post(minilm, "/v1/score", {**too_long, "truncate_prompt_tokens": -1})
    assert cut.status_code == 200 and len(cut.json()["data"]) == 2
    mismatched = {"model": model, "text_1": ["a", "b"], "text_2": ["c", "d", "e"]}
    assert error("/v1/score", mismatched)["param"] == "text_1"
