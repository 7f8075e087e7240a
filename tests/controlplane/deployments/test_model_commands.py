"""load_model, make_demo_model and run_engine: validation, registration, the engine for a name."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import ModelRegistrationError, served_model_register
from engine import protocol

REPO = Path(__file__).resolve().parents[3]


def broken_copy(tiny_llama: Path, tmp_path: Path, breakage) -> Path:
    path = tmp_path / "ckpt"
    shutil.copytree(tiny_llama, path)
    breakage(path)
    return path


@pytest.mark.django_db
def test_load_model_registers_with_progress_and_size(tiny_llama):
    out = io.StringIO()
    call_command("load_model", str(tiny_llama), "--name", "tiny", stdout=out)
    text = out.getvalue()
    assert "reading config.json" in text and "rendering the chat template" in text
    assert "Registered 'tiny': LlamaForCausalLM" in text and "float32" in text
    model = ServedModel.objects.get(name="tiny")
    assert model.path == str(tiny_llama.resolve()) and model.num_parameters > 0
    assert model.max_model_len == 2048
    # Adding a model is audited, as deleting one is, with who ran the command.
    event = AuditEvent.objects.get(action="model.register")
    assert event.target_type == "deployments.servedmodel" and event.target_id == str(model.pk)
    assert event.actor_label.startswith("manage.py load_model")


@pytest.mark.django_db
def test_load_model_again_updates_the_same_name(tiny_llama, checkpoints):
    served_model_register(path=tiny_llama, name="m")
    other = checkpoints.get("qwen3")
    served_model_register(path=other, name="m")
    assert ServedModel.objects.filter(name="m").count() == 1
    assert ServedModel.objects.get(name="m").architecture == "Qwen3ForCausalLM"


def _unsupported(path: Path) -> None:
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(config))


def _no_weights(path: Path) -> None:
    (path / "model.safetensors").unlink()


def _no_tokenizer(path: Path) -> None:
    (path / "tokenizer.json").unlink()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_unsupported, "GPT2LMHeadModel"),
        (_no_weights, "no .safetensors"),
        (_no_tokenizer, "no tokenizer.json"),
    ],
)
def test_bad_checkpoint_says_why_and_registers_nothing(tiny_llama, tmp_path, breakage, message):
    path = broken_copy(tiny_llama, tmp_path, breakage)
    with pytest.raises(CommandError, match=message):
        call_command("load_model", str(path), "--name", "broken", stdout=io.StringIO())
    assert not ServedModel.objects.filter(name="broken").exists()


@pytest.mark.django_db
def test_bad_names_are_refused(tiny_llama):
    with pytest.raises(ModelRegistrationError, match="invalid"):
        served_model_register(path=tiny_llama, name="has space")


def test_load_model_exit_code_on_a_missing_directory(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "load_model", str(tmp_path / "nope"), "--name", "x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
    )
    assert result.returncode != 0
    assert "is not a file or folder on the server, nor a Hugging Face hub id" in result.stderr


@pytest.mark.slow
def test_make_demo_model_writes_a_loadable_checkpoint(tmp_path):
    out = io.StringIO()
    call_command(
        "make_demo_model", str(tmp_path / "demo"), "--arch", "qwen2", "--size", "tiny", stdout=out
    )
    assert "Wrote" in out.getvalue()
    from engine.checkpoint_info import inspect_checkpoint

    assert inspect_checkpoint(tmp_path / "demo").architecture == "Qwen2ForCausalLM"


@pytest.mark.django_db
def test_run_engine_refuses_an_unknown_model():
    with pytest.raises(CommandError, match="no served model named 'ghost'"):
        call_command("run_engine", "--model", "ghost")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_run_engine_serves_the_registered_model_until_drained(
    tiny_llama, redis_server, settings, monkeypatch
):
    settings.PLATFORM_REDIS_PREFIX = f"cmd{uuid.uuid4().hex[:6]}"
    # run_engine exports the prefix for the engine service; undo that after the test.
    monkeypatch.setenv("PLATFORM_REDIS_PREFIX", settings.PLATFORM_REDIS_PREFIX)
    served_model_register(path=tiny_llama, name="cmd-model")
    keys = protocol.Keys(settings.PLATFORM_REDIS_PREFIX)
    r = redis.Redis.from_url(redis_server.url)
    errors: list[BaseException] = []

    def run():
        try:
            call_command(
                "run_engine",
                "--model",
                "cmd-model",
                "--engine-id",
                "cmd1",
                "--device",
                "cpu",
                "--redis-url",
                redis_server.url,
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not r.exists(keys.status("cmd-model", "cmd1")):
            assert time.monotonic() < deadline and thread.is_alive(), errors
            time.sleep(0.1)
        status = protocol.decode_status(r.get(keys.status("cmd-model", "cmd1")))
        assert status.model == "cmd-model" and status.num_total_blocks > 0
    finally:
        # A Drain command on the model's control stream ends it, as SIGTERM would.
        r.xadd(keys.control("cmd-model"), {protocol.FIELD: protocol.encode(protocol.Drain())})
        thread.join(30)
    assert not thread.is_alive() and not errors
    assert not r.exists(keys.status("cmd-model", "cmd1"))
    r.close()


def test_run_engine_schedules_fairly_unless_told_otherwise():
    # Batch API lines run in the batch class and tenants share the engine: the platform's
    # engines must use the fair policy (engine/core/fair_share.py).
    from controlplane.deployments.management.commands.run_engine import Command

    parser = Command().create_parser("manage.py", "run_engine")
    assert parser.parse_args(["--model", "m"]).scheduling_policy == "fair"
    assert parser.parse_args(["--model", "m", "--scheduling-policy", "fcfs"]).scheduling_policy == (
        "fcfs"
    )
