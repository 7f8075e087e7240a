"""Acceptance tests of the engine service: a real engine process, a real Redis, the client.

One engine process serves the whole module (starting one costs seconds on 2 cores); each
test uses its own request ids, and the module uses its own key prefix.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import pytest
import redis

from engine import protocol
from engine.protocol import FIELD, Keys
from engine.text.tokenizer import ChatTokenizer
from engine.tooling.demo.tokenizer import CORPUS_PATH
from inference.transport.engine_capacity import ADMISSION_CACHE_S
from inference.transport.engine_client import EngineClient, EngineRequest, SamplingOptions
from inference.transport.engine_request import OutputOptions
from tests.engine.service.support import (
    EngineProcess,
    offline_greedy,
    serve_module_engine,
    wait_for,
)

MODEL = "tiny-llama"
PREFIX = f"svc{uuid.uuid4().hex[:6]}"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(tiny_llama, redis_server, tmp_path_factory):
    options = ("--status-interval", "0.2", "--status-ttl", "2")
    yield from serve_module_engine(
        tiny_llama, MODEL, redis_server, PREFIX, tmp_path_factory, *options
    )


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return ChatTokenizer(tiny_llama)


@pytest.fixture
async def client(engine, redis_server):
    client = EngineClient(redis_server.url, prefix=PREFIX, silence_timeout=30.0)
    yield client
    await client.close()


def corpus_prompts(tokenizer, count: int) -> list[list[int]]:
    """Prompts of varied lengths from the demo corpus (multilingual lines included)."""
    lines = [ln for ln in CORPUS_PATH.read_text(encoding="utf-8").splitlines() if len(ln) > 20]
    multibyte = [ln for ln in lines if any(ord(ch) > 127 for ch in ln)]
    picked = (multibyte[: count // 2] + lines[:: max(1, len(lines) // count)])[:count]
    return [tokenizer.encode(line)[: 8 + (i * 7) % 56] for i, line in enumerate(picked)]


async def run(client, tokenizer, prompt, **kwargs):
    sampling = kwargs.pop("sampling", SamplingOptions(temperature=0.0, max_tokens=16))
    chunks = []
    async for chunk in client.generate(
        EngineRequest.build(model=MODEL, prompt_token_ids=prompt, sampling=sampling, **kwargs),
        tokenizer,
    ):
        chunks.append(chunk)
    return chunks


async def test_64_concurrent_requests_match_the_offline_engine(
    engine, client, tokenizer, tiny_llama
):
    prompts = corpus_prompts(tokenizer, 64)
    max_tokens = [4 + (i * 5) % 29 for i in range(64)]
    expected = offline_greedy(tiny_llama, prompts, max_tokens)
    results = await asyncio.gather(
        *[
            run(client, tokenizer, p, sampling=SamplingOptions(temperature=0.0, max_tokens=n))
            for p, n in zip(prompts, max_tokens, strict=True)
        ]
    )
    for i, chunks in enumerate(results):
        tokens = [t for c in chunks for t in c.token_ids]
        assert tokens == expected[i], f"request {i} differs from the offline engine"
        text = "".join(c.text for c in chunks)
        # The decode, less a character the length cut left incomplete (its U+FFFD halves are
        # no part of what the model wrote: engine/text/detokenizer.py).
        whole = tokenizer.decode(tokens).rstrip("\ufffd")
        assert text == whole, f"request {i}: streamed text is not the decode"
        last = chunks[-1]
        assert last.finish_reason in ("length", "stop")
        assert last.completion_tokens == len(tokens)
        assert last.prompt_tokens == len(prompts[i])


def test_one_output_entry_per_step_per_frontend(engine, tokenizer):
    """N running requests of one frontend: each engine step writes ONE entry holding N deltas."""
    client = redis.Redis.from_url(_url(engine))
    keys = Keys(PREFIX)
    frontend = f"raw-{uuid.uuid4().hex[:6]}"
    n, max_tokens = 8, 12
    prompt = tokenizer.encode("The quick brown fox")
    pipe = client.pipeline()
    for i in range(n):
        request = protocol.GenerateRequest(
            request_id=f"{frontend}-{i}",
            frontend_id=frontend,
            prompt_token_ids=prompt,
            sampling=protocol.SamplingOptions(
                temperature=0.0, max_tokens=max_tokens, ignore_eos=True
            ),
        )
        pipe.xadd(keys.requests(MODEL), {FIELD: protocol.encode(request)})
    pipe.execute()

    def all_finished():
        entries = client.xrange(keys.outputs(frontend))
        batches = [protocol.decode_outputs(f[FIELD]) for _, f in entries]
        done = {d.request_id for b in batches for d in b.deltas if d.finish_reason}
        return batches if len(done) == n else None

    batches = wait_for(all_finished, 30, "all requests to finish")
    tokens = sum(len(d.new_token_ids) for b in batches for d in b.deltas)
    assert tokens == n * max_tokens
    steps = [b.step for b in batches]
    assert len(steps) == len(set(steps)), "two entries for one step"
    for batch in batches:  # one delta per request per step, all in the step's one entry
        ids = [d.request_id for d in batch.deltas]
        assert len(ids) == len(set(ids))
    # Steps in which all N requests ran wrote one entry with N deltas, not N entries.
    assert sum(len(b.deltas) == n for b in batches) >= max_tokens // 2
    assert len(batches) <= tokens // 2
    client.close()


def _url(engine: EngineProcess) -> str:
    kw = engine.redis.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


async def test_abort_frees_kv_blocks_while_others_continue(engine, client, tokenizer):
    # No speculation: with it the tiny model's bystander ran through its tokens, or grew
    # by more blocks between two status records (0.2 s apart) than the victim gave back.
    options = {"temperature": 0.0, "ignore_eos": True, "speculative_decoding": False}
    long = SamplingOptions(max_tokens=2000, **options)
    # ~63 KV blocks: far more than the bystander's growth between two status records; the
    # victim's prompt and output fit the tiny model's 2,048 positions.
    prompt = tokenizer.encode(CORPUS_PATH.read_text(encoding="utf-8")[:8000])[:1000]
    assert len(prompt) == 1000
    until_aborted = SamplingOptions(max_tokens=1000, **options)
    victim = client.generate(
        EngineRequest.build(
            model=MODEL, prompt_token_ids=prompt, sampling=until_aborted, request_id="victim"
        ),
        tokenizer,
    )
    bystander_tokens = [0]

    async def bystander():
        async for chunk in client.generate(
            EngineRequest.build(model=MODEL, prompt_token_ids=prompt[:20], sampling=long), tokenizer
        ):
            bystander_tokens[0] = chunk.completion_tokens

    other = asyncio.create_task(bystander())
    await victim.__anext__()
    before = await asyncio.to_thread(
        wait_for, lambda: (s := engine.status()) and s.num_running == 2 and s, 10, "2 running"
    )
    tokens_before = bystander_tokens[0]
    await victim.aclose()  # what a client disconnect does
    tokens_at_abort = bystander_tokens[0]
    after = await asyncio.to_thread(
        wait_for, lambda: (s := engine.status()) and s.num_running == 1 and s, 5, "abort"
    )
    # Most of the victim's blocks came back. The bystander grows meanwhile: on a fast core by
    # more than a dozen blocks between the two records, counted back here (one more for a
    # block boundary or tokens still in transit).
    grown = (bystander_tokens[0] - tokens_before) // 16 + 1
    freed = after.num_free_blocks - before.num_free_blocks + grown
    assert freed >= len(prompt) // 16 // 2 >= 10
    # The other request goes on generating after the abort.
    await asyncio.to_thread(
        wait_for, lambda: bystander_tokens[0] > tokens_at_abort + 20, 10, "bystander tokens"
    )
    assert not other.done()
    other.cancel()
    await asyncio.gather(other, return_exceptions=True)


async def test_stop_strings_across_tokens_through_the_engine(engine, client, tokenizer):
    prompt = tokenizer.encode("Once upon a time, 日本語で")
    sampling = SamplingOptions(temperature=0.0, max_tokens=40, ignore_eos=True)
    reference = await run(client, tokenizer, prompt, sampling=sampling)
    ids = [t for c in reference for t in c.token_ids]
    full = tokenizer.decode(ids)
    # A stop string that starts inside one token and ends inside a later one.
    pieces = [tokenizer.decode(ids[:k]) for k in range(len(ids) + 1)]
    start = len(pieces[10]) - 1
    end = len(pieces[13]) + 1
    stop = full[start:end]
    assert len(stop) >= 3 and full.find(stop) == start
    cut = await run(
        client, tokenizer, prompt, sampling=sampling, output=OutputOptions(stop=(stop,))
    )
    assert "".join(c.text for c in cut) == full[:start]
    assert (cut[-1].finish_reason, cut[-1].stop_reason) == ("stop", stop)
    assert cut[-1].completion_tokens < 40
    kept = await run(
        client,
        tokenizer,
        prompt,
        sampling=sampling,
        output=OutputOptions(stop=(stop,), include_stop_str_in_output=True),
    )
    assert "".join(c.text for c in kept) == full[:end]


async def test_malformed_entries_are_acked_and_the_engine_goes_on(engine, client, tokenizer):
    stream = Keys(PREFIX).requests(MODEL)
    bad = [
        {FIELD: b"\xc1\xc1 not msgpack"},
        {FIELD: msgspec.msgpack.encode({"type": "nonsense", "request_id": "x"})},
        {FIELD: msgspec.msgpack.encode({"type": "generate", "request_id": "x"})},
        {b"other": b"no m field"},
    ]
    ids = [await client.redis.xadd(stream, fields) for fields in bad]

    def all_acked():
        pending = engine.redis.xpending_range(stream, protocol.ENGINE_GROUP, "-", "+", 100)
        return not {p["message_id"] for p in pending} & set(ids)

    await asyncio.to_thread(wait_for, all_acked, 10, "malformed entries to be acked")
    assert engine.process.poll() is None
    chunks = await run(client, tokenizer, tokenizer.encode("still alive?"))
    assert chunks[-1].finish_reason in ("length", "stop")
    assert "malformed request entry" in engine.log_tail(20000)


async def test_refused_request_gets_a_clear_error(engine, client, tokenizer):
    from inference.transport.engine_client import EngineError

    too_long = SamplingOptions(temperature=0.0, max_tokens=5000)
    with pytest.raises(EngineError, match="max_model_len"):
        await run(client, tokenizer, [1, 2, 3], sampling=too_long)


async def test_status_reports_liveness_fields(engine, client, tokenizer):
    await run(client, tokenizer, tokenizer.encode("count me"))
    await asyncio.to_thread(
        wait_for, lambda: engine.status().generation_tokens_total > 0, 5, "token counts"
    )
    engines = await client.live_engines(MODEL)
    assert [s.engine_id for s in engines] == [engine.engine_id]
    status = engines[0]
    assert status.model == MODEL and not status.draining
    assert status.num_total_blocks > 0 and status.generation_tokens_total > 0
    assert time.time() - status.updated_at < 2
    assert await client.is_model_ready(MODEL)


async def announce_adapter(redis, keys, model, *, load=None, unload=None) -> None:
    """What the control plane's adapter services write (controlplane/adapters/engine_sync.py):
    the per-model registry hash, and a control message engines follow."""
    if load is not None:
        await redis.hset(keys.adapters(model), load.name, protocol.encode(load))
        message = protocol.LoadAdapter(adapter=load)
    else:
        await redis.hdel(keys.adapters(model), unload)
        message = protocol.UnloadAdapter(name=unload)
    await redis.xadd(keys.control(model), {protocol.FIELD: protocol.encode(message)})


async def test_adapters_must_be_published_before_use(
    engine, client, tokenizer, tiny_llama, tmp_path
):
    from engine.tooling.random_lora import make_random_adapter
    from inference.transport.engine_capacity import AdapterLoading

    prompt = tokenizer.encode("adapter test")
    greedy = SamplingOptions(temperature=0.0, max_tokens=12, ignore_eos=True)
    ghost = protocol.AdapterRef(name="ghost")
    # No live engine lists it: refused before it reaches a stream (the API answers 503).
    with pytest.raises(AdapterLoading, match="adapter 'ghost' is loading"):
        await run(client, tokenizer, prompt, adapter=ghost, sampling=greedy)
    path = make_random_adapter(tiny_llama, tmp_path / "ghost", rank=4, b_std=0.5)
    await announce_adapter(
        client.redis, client.keys, MODEL, load=protocol.AdapterRef(name="ghost", path=str(path))
    )
    await asyncio.to_thread(
        wait_for, lambda: "ghost" in engine.status().adapters, 10, "adapter listed"
    )
    await asyncio.sleep(ADMISSION_CACHE_S)  # the client's status snapshot may predate it
    base = await run(client, tokenizer, prompt, sampling=greedy)
    tuned = await run(client, tokenizer, prompt, adapter=ghost, sampling=greedy)
    assert tuned[-1].completion_tokens == 12
    # The adapter's weights are applied: greedy output differs from the base model's.
    assert [t for c in tuned for t in c.token_ids] != [t for c in base for t in c.token_ids]
    await announce_adapter(client.redis, client.keys, MODEL, unload="ghost")
    await asyncio.to_thread(
        wait_for, lambda: "ghost" not in engine.status().adapters, 10, "adapter withdrawn"
    )


async def test_an_adapter_whose_control_message_was_lost_is_loaded_within_a_beat(
    engine, client, tokenizer, tiny_llama, tmp_path
):
    """Only the registry hash is written: the engine's periodic reconcile finds it."""
    from engine.lora.validation import adapter_checksum
    from engine.tooling.random_lora import make_random_adapter

    path = make_random_adapter(tiny_llama, tmp_path / "quiet", rank=4, b_std=0.5)
    ref = protocol.AdapterRef(name="quiet", checksum=adapter_checksum(path), path=str(path))
    registry = client.keys.adapters(MODEL)
    start = time.monotonic()
    await client.redis.hset(registry, ref.name, protocol.encode(ref))
    await asyncio.to_thread(
        wait_for, lambda: engine.status().holds_adapter("quiet", ref.checksum), 10, "reconciled"
    )
    assert time.monotonic() - start < 2.0 + 1.0  # one beat (2 s), then a status tick
    await asyncio.sleep(ADMISSION_CACHE_S)
    greedy = SamplingOptions(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompt = tokenizer.encode("a lost control message")
    tuned = await run(client, tokenizer, prompt, adapter=ref, sampling=greedy)
    base = await run(client, tokenizer, prompt, sampling=greedy)
    assert [t for c in tuned for t in c.token_ids] != [t for c in base for t in c.token_ids]

    await client.redis.hdel(registry, ref.name)  # withdrawn, again without a message
    await asyncio.to_thread(
        wait_for, lambda: "quiet" not in engine.status().adapters, 10, "unloaded by reconcile"
    )


async def test_a_bad_adapter_in_the_registry_is_logged_and_not_retried_every_beat(
    engine, client, tokenizer, tmp_path
):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{not json")
    ref = protocol.AdapterRef(name="broken", checksum="0" * 64, path=str(broken))
    await client.redis.hset(client.keys.adapters(MODEL), ref.name, protocol.encode(ref))
    try:
        await asyncio.sleep(5.0)  # two beats and more
        assert "broken" not in engine.status().adapters
        log = engine.log_tail(200_000)
        assert log.count("adapter 'broken' from") == 1, log[-3000:]
        # The engine goes on serving.
        chunks = await run(client, tokenizer, tokenizer.encode("still serving"))
        assert chunks[-1].finish_reason is not None
    finally:
        await client.redis.hdel(client.keys.adapters(MODEL), ref.name)
