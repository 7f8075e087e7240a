"""Structured outputs through a real engine process and Redis: the spec travels in
GenerateRequest.sampling.structured, the output streams back token by token and follows it."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest

from engine.protocol import StructuredOutput
from engine.text.tokenizer import ChatTokenizer
from inference.transport.engine_client import (
    EngineClient,
    EngineError,
    EngineRequest,
    SamplingOptions,
)
from tests.engine.service.support import serve_module_engine
from tests.support.structured_specs import PERSON_SCHEMA, SPECS

MODEL = "tiny-structured"
PREFIX = f"so{uuid.uuid4().hex[:6]}"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(tiny_llama, redis_server, tmp_path_factory):
    yield from serve_module_engine(tiny_llama, MODEL, redis_server, PREFIX, tmp_path_factory)


@pytest.fixture
async def client(engine, redis_server):
    client = EngineClient(redis_server.url, prefix=PREFIX, silence_timeout=30.0)
    yield client
    await client.close()


async def generate(client, tokenizer, prompt, sampling):
    chunks = []
    async for chunk in client.generate(
        EngineRequest.build(model=MODEL, prompt_token_ids=prompt, sampling=sampling), tokenizer
    ):
        chunks.append(chunk)
    return chunks


async def test_streamed_json_follows_the_schema(engine, client, tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)
    prompt = tokenizer.encode("Describe a person as JSON:")
    structured = StructuredOutput(kind="json", spec=json.dumps(PERSON_SCHEMA))
    for temperature in (0.0, 1.0):
        sampling = SamplingOptions(temperature=temperature, max_tokens=200, structured=structured)
        chunks = await generate(client, tokenizer, prompt, sampling)
        assert len([c for c in chunks if c.text]) > 3  # streamed, not one final blob
        text = "".join(c.text for c in chunks)
        jsonschema.validate(json.loads(text), PERSON_SCHEMA)
        assert chunks[-1].finish_reason == "stop"


async def test_n_samples_each_follow_the_grammar(engine, client, tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)
    structured, check = SPECS["regex"]
    sampling = SamplingOptions(n=3, temperature=1.0, max_tokens=60, structured=structured)
    chunks = await generate(client, tokenizer, tokenizer.encode("Email:"), sampling)
    for index in range(3):
        check("".join(c.text for c in chunks if c.index == index))


async def test_a_spec_the_engine_cannot_compile_is_an_error_not_a_crash(engine, client, tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)
    bad = StructuredOutput(kind="regex", spec="[unclosed")
    with pytest.raises(EngineError, match="regex"):
        await generate(client, tokenizer, [5, 6, 7], SamplingOptions(max_tokens=8, structured=bad))
    structured, check = SPECS["choice"]
    chunks = await generate(
        client, tokenizer, [5, 6, 7], SamplingOptions(max_tokens=20, structured=structured)
    )
    check("".join(c.text for c in chunks))
