"""The pooling runner matches sentence-transformers on all-MiniLM-L6-v2, in batches."""

from __future__ import annotations

import pytest
import torch

from engine.pooling.runner import PoolingRunner, default_model_path

pytestmark = pytest.mark.slow

TEXTS = ["a cat", "a kitten sleeping on the sofa", "a quarterly tax report", "x"]


@pytest.fixture(scope="module")
def runner():
    return PoolingRunner(default_model_path())


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(default_model_path()), device="cpu")


def _ids(reference, text: str) -> list[int]:
    return reference.tokenizer(text)["input_ids"]


def test_matches_sentence_transformers(runner, reference):
    expected = reference.encode(TEXTS, convert_to_tensor=True)
    got = runner.embed([_ids(reference, t) for t in TEXTS])
    assert got.shape == (len(TEXTS), 384)
    torch.testing.assert_close(got, expected.cpu(), atol=2e-5, rtol=1e-4)
    assert torch.allclose(got.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5)


def test_batching_keeps_input_order_and_values(runner, reference):
    ids = [_ids(reference, t) for t in TEXTS]
    small_batches = PoolingRunner.__new__(PoolingRunner)
    small_batches.__dict__.update(runner.__dict__)
    small_batches.max_batch_tokens = 8  # forces one or two inputs per forward pass
    torch.testing.assert_close(small_batches.embed(ids), runner.embed(ids), atol=1e-5, rtol=1e-4)
    assert runner.embed([]).shape == (0, 384)
