"""The harness itself: a private Redis, offline tiny checkpoints, torch importable, the test
groups ordered where xdist collects them."""

import argparse
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from django.core.cache import cache


def test_session_redis_is_private_and_real(redis_server, redis_client):
    assert os.environ["REDIS_URL"] == redis_server.url
    assert redis_server.port != 6379  # never the machine's shared server
    redis_client.set("probe", "1")
    assert redis_client.get("probe") == b"1"
    info = redis_client.info("server")
    assert int(info["tcp_port"]) == redis_server.port


def test_django_cache_uses_session_redis(redis_server, redis_client):
    cache.set("harness-key", "value", 30)
    keys = [k.decode() for k in redis_client.keys("*harness-key*")]
    assert keys, "Django's cache did not write to the session's Redis"


@pytest.mark.parametrize("arch", ["llama", "llama3", "mistral", "qwen2", "qwen3"])
def test_tiny_checkpoints_load_offline(checkpoints, arch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = checkpoints.get(arch)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Bonjour, ça va? 日本語 🙂"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert tokenizer.decode(ids[0]) == prompt  # byte-level BPE round-trips any UTF-8
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4 or tokenizer.eos_token_id in out[0].tolist()
    expected = {
        "llama": "Llama",
        "llama3": "Llama",
        "mistral": "Mistral",
        "qwen2": "Qwen2",
        "qwen3": "Qwen3",
    }
    assert model.config.architectures == [f"{expected[arch]}ForCausalLM"]
    assert torch.isfinite(model(ids).logits).all()


def test_checkpoints_are_deterministic(tmp_path):
    from engine.tooling.demo.checkpoint import make_checkpoint

    a = make_checkpoint(tmp_path / "a", arch="qwen3")
    b = make_checkpoint(tmp_path / "b", arch="qwen3")
    for name in ["model.safetensors", "tokenizer.json", "config.json"]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_torch_uuid_redis_import_from_repo_root():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-c", "import torch, uuid, redis, platform; print(platform.system())"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Linux"


def _pytest_config(dist: str) -> SimpleNamespace:
    option = argparse.Namespace(dist=dist)
    return SimpleNamespace(option=option, getvalue=lambda name: getattr(option, name))


def test_xdist_workers_order_the_groups_longest_first_too():
    """xdist's workers collect, so they must order the groups (tests/conftest.py), and xdist
    rewrites a worker's options: a check of ``dist`` alone left every run in path order."""
    from xdist.remote import setup_config

    from tests.support.test_order import spread_by_group

    worker = _pytest_config("loadgroup")
    setup_config(worker, None)
    assert worker.option.dist == "no"
    assert spread_by_group(worker)
    assert spread_by_group(_pytest_config("loadgroup"))  # xdist's controller
    plain_worker = _pytest_config("load")
    setup_config(plain_worker, None)
    assert not spread_by_group(plain_worker)
    assert not spread_by_group(_pytest_config("no"))
