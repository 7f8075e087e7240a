"""A model registered with ``load_model --quantization int8`` is served quantized: its engine
(``manage.py run_engine``, as ``serve`` starts it) loads int8 weights, and the real SmolLM2
still answers through the official openai SDK."""

from __future__ import annotations

import openai
import pytest

from controlplane.launcher.process_commands import run_engine_command
from tests.support.platform_services import database_path, platform_stack
from tests.support.shared_database import FileDatabase

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = "smollm2-int8"
PREFIX = "quante2e"


@pytest.fixture(scope="module")
def quantized_platform(tmp_path_factory, smollm2):
    path, _lines = smollm2
    workdir = tmp_path_factory.mktemp("quant-e2e")
    with platform_stack(workdir, redis_prefix=PREFIX) as stack:
        db = FileDatabase(database_path(workdir), stack.redis_url)
        db.env.update(stack.env)
        registered = db.manage("load_model", str(path), "--name", MODEL, "--quantization", "int8")
        db.manage("create_tenant", "Quant", "--model", MODEL)
        secret = db.create_key("Quant")
        stack.env = db.env
        base_url = stack.start_daphne(timeout=90)
        engine_log = workdir / "engine.log"
        command = run_engine_command(
            MODEL, redis_url=stack.redis_url, device="cpu", max_model_len=512, max_num_seqs=4
        )
        stack.start(
            "engine",
            command,
            log=engine_log,
            ready=lambda: stack.engine_live(MODEL),
            timeout=240,
            stop_timeout=20,
        )
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=secret, max_retries=0)
        yield client, registered.stdout, engine_log


def test_load_model_records_the_quantization(quantized_platform):
    _client, registered, _log = quantized_platform
    assert f"Registered '{MODEL}'" in registered and "weights int8" in registered


def test_the_engine_serves_int8_weights_and_still_knows_paris(quantized_platform):
    client, _registered, engine_log = quantized_platform
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=24,
    )
    assert "Paris" in reply.choices[0].message.content
    log = engine_log.read_text()
    assert "quantized the projections to int8" in log
    assert "KV cache: " in log and " tokens = " in log
