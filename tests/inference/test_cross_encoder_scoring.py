"""A cross-encoder served by the pooling engine, through the rerank and score use cases: the
API's pair encoding (truncation included) and the engine's scores equal transformers' own
tokenizer and forward on the same pairs, and the request is metered like embeddings.

The pooling service runs in this process on the tiny random BertForSequenceClassification,
over the session's real Redis; the use cases run as the API's views call them.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from controlplane.deployments.models import ServedModel
from engine.pooling.runner import PoolingRunner
from engine.pooling.service import PoolingService
from inference import scoring_use_case
from inference.embedding_use_case import create_embeddings
from inference.errors import ApiError
from tests.support.generation_factories import make_principal
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "tiny-reranker"
QUERY = "what do cats eat"
DOCUMENTS = ["cats eat fish and mice", "the tax report is due in april", "meow " * 200]


@pytest.fixture(scope="module")
def reference(tiny_cross_encoder):
    """transformers' CrossEncoder-equivalent scores of (query, document) pairs."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_cross_encoder))
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_cross_encoder)).eval()

    def scores(queries: list[str], documents: list[str], **truncation) -> list[float]:
        batch = tokenizer(queries, documents, padding=True, return_tensors="pt", **truncation)
        with torch.inference_mode():
            return torch.sigmoid(model(**batch).logits)[:, 0].tolist()

    return scores


@pytest.fixture(scope="module")
def runner(tiny_cross_encoder):
    return PoolingRunner(tiny_cross_encoder)


@pytest.fixture
def served(tiny_cross_encoder, runner, redis_server, redis_client):
    ServedModel.objects.create(
        name=MODEL,
        path=str(tiny_cross_encoder),
        architecture="BertForSequenceClassification",
        max_model_len=128,
    )
    service = PoolingService(runner, model_name=MODEL, redis_url=redis_server.url, block_ms=50)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    # Until its status record is in Redis: the use cases refuse a model no live engine serves,
    # and on a loaded machine the thread had not published yet when a test began (PostgreSQL
    # stage in CI, 2026-11-24).
    status_key = service.keys.status(MODEL, service.engine_id)
    wait_for(lambda: redis_client.exists(status_key), timeout=30, what="the pooling engine")
    yield service
    service.stop()
    thread.join(timeout=30)


async def test_rerank_scores_are_transformers_forward(served, reference, usage_events):
    body = {"model": MODEL, "query": QUERY, "documents": DOCUMENTS}
    payload, _headers = await scoring_use_case.rerank(
        make_principal(), body, api_version="1", started=time.monotonic()
    )
    # The long document is cut to fit the model's 128 positions, as transformers'
    # truncation="only_second" cuts it.
    expected = reference([QUERY] * 3, DOCUMENTS, truncation="only_second", max_length=128)
    by_index = {r["index"]: r["relevance_score"] for r in payload["results"]}
    assert [by_index[i] for i in range(3)] == pytest.approx(expected, abs=1e-5)
    assert [r["index"] for r in payload["results"]] == sorted(range(3), key=lambda i: -expected[i])
    assert len(set(expected)) == 3 and max(expected) - min(expected) > 1e-3  # not all alike
    # Each pair is one input: [CLS] query [SEP] document [SEP]; the long one is 128 tokens.
    query_tokens = 4
    pair_tokens = [query_tokens + 3 + 5, query_tokens + 3 + 7, 128]
    assert payload["usage"]["prompt_tokens"] == sum(pair_tokens)
    (event,) = await usage_events()
    assert (event.model, event.prompt_tokens, event.status) == (MODEL, sum(pair_tokens), 200)


async def test_score_pairs_and_cut_documents(served, reference):
    body = {"model": MODEL, "text_1": [QUERY, "tax"], "text_2": DOCUMENTS[:2]}
    payload, _ = await scoring_use_case.score(make_principal(), body, started=time.monotonic())
    expected = reference([QUERY, "tax"], DOCUMENTS[:2])
    assert [d["score"] for d in payload["data"]] == pytest.approx(expected, abs=1e-5)

    capped = {
        "model": MODEL,
        "text_1": QUERY,
        "text_2": DOCUMENTS[2:],
        "truncate_prompt_tokens": 20,
    }
    payload, _ = await scoring_use_case.score(make_principal(), capped, started=time.monotonic())
    expected = reference([QUERY], DOCUMENTS[2:], truncation="only_second", max_length=20)
    assert payload["data"][0]["score"] == pytest.approx(expected[0], abs=1e-5)
    assert payload["usage"]["prompt_tokens"] == 20

    with pytest.raises(ApiError) as too_long:
        uncut = {"model": MODEL, "text_1": QUERY, "text_2": DOCUMENTS[2:]}
        await scoring_use_case.score(make_principal(), uncut, started=time.monotonic())
    assert too_long.value.code == "context_length_exceeded" and too_long.value.param == "text_2"


async def test_a_cross_encoder_makes_no_embeddings(served):
    with pytest.raises(ApiError) as refused:
        await create_embeddings(make_principal(), {"model": MODEL, "input": "a cat"})
    assert refused.value.status == 400 and "/v1/rerank" in str(refused.value)
