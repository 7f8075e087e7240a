"""The README's serve command: platform up, /health answers, Ctrl-C leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request

import pytest

from controlplane.launcher.redis_server import free_port
from tests.support.processes import pids_with_env, serve_until_up
from tests.support.smollm2 import seed_demo_model


def _health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
            return resp.status
    except OSError:
        return None


def _chat_and_embed_like_the_readme(port: int, api_key: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key)
    ids = {m.id for m in client.models.list()}
    assert {"smollm2-135m-instruct", "all-MiniLM-L6-v2"} <= ids
    reply = client.chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=64,
        temperature=0,
    )
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    vectors = client.embeddings.create(model="all-MiniLM-L6-v2", input=["a cat", "a dog"])
    assert [len(item.embedding) for item in vectors.data] == [384, 384]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serve_brings_platform_up_and_ctrl_c_stops_everything(tmp_path, smollm2):
    port = free_port()
    var_dir = tmp_path / "var"
    # A first run in every other respect (database, keys, credentials, Redis), with the demo
    # model converted once for the whole test run; CI's newcomer step (.ci/newcomer.py) runs
    # the real first run, conversion included.
    seed_demo_model(var_dir, smollm2[0])
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env["PLATFORM_VAR_DIR"] = str(var_dir)
    marker = f"PLATFORM_VAR_DIR={var_dir}"
    proc, text, api_key = serve_until_up(env, "--port", str(port), timeout=480)
    try:
        assert "The platform is up." in text, text
        assert _health(port) == 200
        assert api_key.startswith("sk-")
        assert "password" in text and f"http://127.0.0.1:{port}/admin/" in text
        children = pids_with_env(marker)
        assert len(children) >= 5, "expected redis, two engines, celery and daphne to run"
        _chat_and_embed_like_the_readme(port, api_key)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    time.sleep(0.5)
    assert pids_with_env(marker) == [], "processes of the platform were left running"
    assert _health(port) is None
