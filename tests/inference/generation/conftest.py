"""Served models for tests that look models up (usage records: tests/inference/conftest.py)."""

from __future__ import annotations

import pytest

from controlplane.deployments.models import ServedModel
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
