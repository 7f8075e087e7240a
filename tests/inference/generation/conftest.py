"""Usage records as billing reads them, and served models for tests that look models up."""

from __future__ import annotations

import pytest

from controlplane.access.admission import finish_pending
from controlplane.deployments.models import ServedModel
from controlplane.usage.events import decode_event, usage_queue_key
from tests.support.generation_factories import EMBEDDING_MODEL, MAX_MODEL_LEN, MODEL


@pytest.fixture
async def served(tiny_llama) -> ServedModel:
    """The tiny llama as MODEL (context MAX_MODEL_LEN), and an embedding model beside it.

    Needs ``@pytest.mark.django_db(transaction=True)`` on the test.
    """
    await ServedModel.objects.acreate(
        name=EMBEDDING_MODEL, path=str(tiny_llama), architecture="BertModel", max_model_len=128
    )
    return await ServedModel.objects.acreate(
        name=MODEL,
        path=str(tiny_llama),
        architecture="LlamaForCausalLM",
        max_model_len=MAX_MODEL_LEN,
    )


@pytest.fixture
def usage_events(redis_client):
    """``await usage_events()``: the usage records queued in Redis so far (emptied per test)."""

    async def read():
        await finish_pending()
        return [decode_event(raw) for raw in redis_client.lrange(usage_queue_key(), 0, -1)]

    return read
