"""A cross-encoder checkpoint in the pooling runner: its scores are transformers' own forward
(sigmoid of the one logit, as sentence-transformers' CrossEncoder gives) on the same pairs."""

from __future__ import annotations

import pytest
import torch

from engine.pooling.runner import PoolingRunner

QUERY = "what do cats eat"
DOCUMENTS = ["cats eat fish and mice", "the tax report is due in april", "x", "meow " * 30]


@pytest.fixture(scope="module")
def runner(tiny_cross_encoder):
    return PoolingRunner(tiny_cross_encoder)


@pytest.fixture(scope="module")
def reference(tiny_cross_encoder):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_cross_encoder))
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_cross_encoder)).eval()
    return tokenizer, model


def test_scores_equal_transformers_forward(runner, reference):
    tokenizer, model = reference
    batch = tokenizer([QUERY] * len(DOCUMENTS), DOCUMENTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = torch.sigmoid(model(**batch).logits)  # [num_pairs, 1]
    pairs = tokenizer([QUERY] * len(DOCUMENTS), DOCUMENTS)
    got = runner.embed(pairs["input_ids"], pairs["token_type_ids"])
    assert runner.is_cross_encoder and runner.dimensions == 1
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    # Token types matter: the document segment read as the query's gives other scores.
    as_one_segment = runner.embed(pairs["input_ids"])
    assert not torch.allclose(as_one_segment, got, atol=1e-4)
    # One pair a forward pass scores the same as the whole batch at once.
    one_at_a_time = PoolingRunner.__new__(PoolingRunner)
    one_at_a_time.__dict__.update(runner.__dict__)
    one_at_a_time.max_batch_tokens = 1
    torch.testing.assert_close(
        one_at_a_time.embed(pairs["input_ids"], pairs["token_type_ids"]), got, atol=1e-5, rtol=1e-4
    )


def test_a_multi_label_classifier_is_refused(tiny_cross_encoder, tmp_path):
    import json
    import shutil

    shutil.copytree(tiny_cross_encoder, tmp_path / "nli")
    config_file = tmp_path / "nli" / "config.json"
    config = json.loads(config_file.read_text())
    config["id2label"] = {"0": "a", "1": "b", "2": "c"}
    config_file.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="3 labels"):
        PoolingRunner(tmp_path / "nli")
