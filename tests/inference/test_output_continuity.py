"""A stream whose outputs were lost in transit ends with an error, never a normal finish.

Engines never drop outputs, but a Redis that restarts without its last writes can. Each delta
carries the running count of tokens its engine request sent; here a stand-in engine answers
through the real Redis with one entry missing, and the EngineClient must fail the request
instead of reporting ``finish_reason: "length"`` with tokens missing (issue 15.2).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from engine import protocol
from engine.protocol import FIELD, Keys
from inference.transport.engine_client import (
    EngineClient,
    EngineError,
    EngineRequest,
    SamplingOptions,
)
from inference.transport.output_continuity import LOST_MESSAGE
from tests.support.engine_status import publish_engine_status

MODEL = "continuity"


class _Digits:
    def decode(self, ids, *, skip_special_tokens=True):
        return "".join(str(i % 10) for i in ids)


async def _answer(client, keys: Keys, *, drop_second: bool) -> None:
    """Read the request as an engine would, then send three deltas (maybe losing one)."""
    while not (entries := client.xrange(keys.requests(MODEL))):
        await asyncio.sleep(0.01)
    request = protocol.decode_request(entries[0][1][FIELD])
    deltas = [
        protocol.RequestDelta(
            request_id=request.request_id, new_token_ids=[1, 2], num_output_tokens=2
        ),
        protocol.RequestDelta(
            request_id=request.request_id, new_token_ids=[3, 4], num_output_tokens=4
        ),
        protocol.RequestDelta(
            request_id=request.request_id,
            new_token_ids=[5],
            finish_reason="length",
            num_output_tokens=5,
        ),
    ]
    if drop_second:
        del deltas[1]
    for delta in deltas:
        batch = protocol.OutputBatch(engine_id="stand-in", deltas=[delta])
        client.xadd(keys.outputs(request.frontend_id), {FIELD: protocol.encode(batch)})


@pytest.mark.parametrize("drop_second", [False, True])
async def test_a_gap_in_the_outputs_is_an_error_not_a_short_finish(
    redis_server, redis_client, drop_second
):
    prefix = f"cont{uuid.uuid4().hex[:6]}"
    keys = Keys(prefix)
    publish_engine_status(redis_client, prefix=prefix, model=MODEL)
    client = EngineClient(redis_server.url, prefix=prefix, silence_timeout=5)
    engine = asyncio.create_task(_answer(redis_client, keys, drop_second=drop_second))
    tokens: list[int] = []
    finish = None
    try:
        async for chunk in client.generate(
            EngineRequest.build(
                model=MODEL, prompt_token_ids=[7, 8, 9], sampling=SamplingOptions(max_tokens=5)
            ),
            _Digits(),
        ):
            tokens += chunk.token_ids
            finish = chunk.finish_reason or finish
    except EngineError as exc:
        assert drop_second and str(exc) == LOST_MESSAGE
        assert finish is None  # never a normal finish
    else:
        assert not drop_second
        assert tokens == [1, 2, 3, 4, 5] and finish == "length"
    finally:
        await engine
        await client.close()
