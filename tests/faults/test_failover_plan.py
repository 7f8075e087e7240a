"""The re-submission a failover sends (inference/transport/failover.py), checked on the message itself:
prompt + delivered tokens, the budget left, the sample's own seed, no prompt logprobs again
once some were delivered."""

from __future__ import annotations

from engine import protocol
from engine.protocol import SamplingOptions
from inference.transport.failover import resumed_request


def _original(**sampling) -> protocol.GenerateRequest:
    return protocol.GenerateRequest(
        request_id="cmpl-1",
        frontend_id="fe",
        prompt_token_ids=[1, 2, 3],
        sampling=SamplingOptions(**sampling),
        tenant="acme",
        arrival_time=123.0,
        priority=2,
    )


def test_single_sample_resumes_with_prompt_plus_output_and_budget_left():
    original = _original(max_tokens=10, min_tokens=5, seed=42, prompt_logprobs=2, logprobs=1)
    resumed = resumed_request(original, 0, [7, 8, 9], attempt=1)
    assert resumed.request_id == "cmpl-1~1"
    assert resumed.prompt_token_ids == [1, 2, 3, 7, 8, 9]
    assert resumed.resumed_output_tokens == 3
    assert resumed.sampling.max_tokens == 7
    assert resumed.sampling.min_tokens == 2
    assert resumed.sampling.seed == 42
    assert resumed.sampling.prompt_logprobs is None
    assert resumed.sampling.logprobs == 1
    # Same tenant, priority and arrival: it keeps its place and its bill.
    assert (resumed.tenant, resumed.priority, resumed.arrival_time) == ("acme", 2, 123.0)
    # The original is untouched (its prompt is what usage bills).
    assert original.prompt_token_ids == [1, 2, 3]
    # What crosses Redis decodes to the same thing on the engine's side.
    assert protocol.decode_request(protocol.encode(resumed)) == resumed


def test_sample_of_n_resumes_alone_with_its_own_seed():
    original = _original(n=3, max_tokens=None, min_tokens=1, seed=10, temperature=0.7)
    resumed = resumed_request(original, 2, [4, 4], attempt=2)
    assert resumed.request_id == "cmpl-1~2.2"
    assert resumed.sampling.n == 1
    assert resumed.sampling.seed == 12  # the engine seeds sample i of n with seed + i
    assert resumed.sampling.max_tokens is None
    assert resumed.sampling.min_tokens == 0
    assert resumed.sampling.temperature == 0.7


def test_a_sample_lost_before_its_first_token_asks_for_the_prompt_logprobs_again():
    """They come with a sample's first tokens: lost with none delivered, an echo with
    logprobs would lack them, and the resumed prompt is the original's, so they still fit."""
    resumed = resumed_request(_original(prompt_logprobs=2), 0, [], attempt=1)
    assert resumed.sampling.prompt_logprobs == 2
    assert resumed.prompt_token_ids == [1, 2, 3]


def test_nothing_left_to_generate_means_no_resubmission():
    assert resumed_request(_original(max_tokens=2), 0, [5, 6], attempt=1) is None
    assert resumed_request(_original(), 0, [], attempt=1).resumed_output_tokens == 0


# ---------------------------------------------------------------- Failover over a real Redis


class _Decoder:
    def decode(self, ids, *, skip_special_tokens=True):
        return "".join(f"<{i}>" for i in ids)


def _processor(n: int):
    from inference.transport.engine_request import EngineRequest, OutputOptions
    from inference.transport.output_processor import RequestOutputProcessor

    return RequestOutputProcessor(
        EngineRequest.build(
            model="m",
            prompt_token_ids=[1, 2, 3],
            sampling=SamplingOptions(n=n, min_tokens=0),
            output=OutputOptions(
                stop=(), include_stop_str_in_output=False, skip_special_tokens=True
            ),
        ),
        _Decoder(),
    )


async def _client_with_engines(redis_server, live: bool):
    import uuid

    from inference.transport.engine_client import EngineClient

    prefix = f"fo{uuid.uuid4().hex[:6]}"
    client = EngineClient(redis_server.url, prefix=prefix)
    if live:  # a live engine of the model: its registry entry and status record
        status = protocol.EngineStatus(engine_id="e1", model="m")
        await client.redis.sadd(client.keys.engines(), protocol.engine_member("m", "e1"))
        await client.redis.set(client.keys.status("m", "e1"), protocol.encode_status(status))
    return client


async def test_resume_submits_open_samples_and_maps_their_outputs_back(redis_server):
    import asyncio

    from inference.transport.failover import Failover

    client = await _client_with_engines(redis_server, live=True)
    original = _original(n=2, max_tokens=8, seed=5)
    failover = Failover(client, "m", original)
    outputs = _processor(2)
    queue: asyncio.Queue = asyncio.Queue()
    delivered = protocol.RequestDelta(request_id="cmpl-1", index=1, new_token_ids=[9, 10])
    outputs.process(failover.translate(delivered))
    # Sample 0 finished before the engine died: only sample 1 moves.
    done = protocol.RequestDelta(
        request_id="cmpl-1", index=0, new_token_ids=[4], finish_reason="stop"
    )
    outputs.process(failover.translate(done))

    assert await failover.resume(["cmpl-1"], outputs, queue)
    entries = await client.redis.xrange(client.keys.requests("m"))
    assert len(entries) == 1
    sent = protocol.decode_request(entries[0][1][protocol.FIELD])
    assert sent.request_id == "cmpl-1~1.1"
    assert sent.prompt_token_ids == [1, 2, 3, 9, 10]
    assert (sent.resumed_output_tokens, sent.sampling.max_tokens, sent.sampling.seed) == (2, 6, 6)
    # The resumed request's outputs count as sample 1's; the lost request's are dropped.
    resumed = protocol.RequestDelta(
        request_id="cmpl-1~1.1", new_token_ids=[11], num_prompt_tokens=5, num_cached_tokens=4
    )
    chunk = outputs.process(failover.translate(resumed))
    assert (chunk.index, chunk.token_ids, chunk.completion_tokens) == (1, [11], 3)
    assert (chunk.prompt_tokens, chunk.cached_tokens) == (3, 0)
    assert failover.translate(protocol.RequestDelta(request_id="cmpl-1", index=1)) is None
    await client.close()


async def test_no_resume_without_a_live_engine_or_past_the_limit(redis_server):
    import asyncio

    from inference.transport.failover import Failover

    client = await _client_with_engines(redis_server, live=False)
    failover = Failover(client, "m", _original(max_tokens=8), wait_s=0.3)
    assert not await failover.resume(["cmpl-1"], _processor(1), asyncio.Queue())
    assert await client.redis.xlen(client.keys.requests("m")) == 0
    await client.close()

    client = await _client_with_engines(redis_server, live=True)
    failover = Failover(client, "m", _original(max_tokens=8), max_resumes=1)
    outputs = _processor(1)
    assert await failover.resume(["cmpl-1"], outputs, asyncio.Queue())
    assert not await failover.resume(["cmpl-1~1"], outputs, asyncio.Queue())
    await client.close()
