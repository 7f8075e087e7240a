"""text_completion objects, whole and streamed, as the legacy /v1/completions clients get them."""

from __future__ import annotations

from openai.types import Completion

from inference.formatters import collect_response, formatter_for, stream_events
from inference.generation.plan import GenerationStats
from inference.transport.output_processor import TokenLogprob
from tests.support.generation_factories import (
    engine_items,
    make_chunk,
    make_plan,
    sample_chunks,
    single_prompt,
)

TWO_PROMPTS = [("Once", [11, 12]), ("Twice upon", [21, 22, 23])]


async def stream(plan, items) -> list[dict]:
    formatter = formatter_for(plan, GenerationStats())
    return [chunk async for chunk in stream_events(formatter, engine_items(*items))]


async def whole(plan, items) -> dict:
    return await collect_response(formatter_for(plan, GenerationStats()), engine_items(*items))


def choice(index: int, text: str, finish_reason=None, stop_reason=None, logprobs=None) -> dict:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


async def test_stream_is_text_chunks_then_a_finish_chunk():
    plan = make_plan("completion")
    chunks = await stream(
        plan, single_prompt(sample_chunks([" upon", " a"], finish_reason="length"))
    )
    assert chunks == [
        {
            "id": plan.request_id,
            "object": "text_completion",
            "created": plan.created,
            "model": plan.model,
            "choices": [c],
            "system_fingerprint": None,
        }
        for c in (choice(0, " upon"), choice(0, " a"), choice(0, "", "length"))
    ]
    # The SDK's type admits no null finish_reason (it parses stream chunks without
    # validating): only the finish chunk is checked against it.
    Completion.model_validate(chunks[-1])


async def test_stream_with_echo_opens_each_choice_with_its_prompt():
    plan = make_plan("completion", prompts=TWO_PROMPTS, n=2, echo=True)
    chunks = await stream(plan, [])
    # Choices 0 and 1 are the two samples of the first prompt, 2 and 3 of the second.
    assert [c["choices"] for c in chunks] == [
        [choice(0, "Once")],
        [choice(1, "Once")],
        [choice(2, "Twice upon")],
        [choice(3, "Twice upon")],
    ]


async def test_stream_logprobs_offsets_count_characters_across_chunks():
    plan = make_plan("completion", logprobs=True)
    items = single_prompt(
        [
            make_chunk(
                " upon",
                completion_tokens=2,
                logprobs=[
                    TokenLogprob(5, " up", -0.5, [(5, " up", -0.5), (6, " at", -1.0)]),
                    TokenLogprob(7, "on", -0.1, [(7, "on", -0.1)]),
                ],
            ),
            make_chunk(
                " a",
                completion_tokens=3,
                finish_reason="stop",
                logprobs=[TokenLogprob(8, " a", -0.3, [(8, " a", -0.3)])],
            ),
        ]
    )
    chunks = await stream(plan, items)
    assert [c["choices"][0]["logprobs"] for c in chunks] == [
        {
            "tokens": [" up", "on"],
            "token_logprobs": [-0.5, -0.1],
            "top_logprobs": [{" up": -0.5, " at": -1.0}, {"on": -0.1}],
            "text_offset": [0, 3],
        },
        {
            "tokens": [" a"],
            "token_logprobs": [-0.3],
            "top_logprobs": [{" a": -0.3}],
            "text_offset": [5],
        },
        None,  # the finish chunk
    ]


async def test_stream_final_usage_sums_every_prompt():
    plan = make_plan("completion", prompts=TWO_PROMPTS, include_usage=True)
    items = [
        (0, 0, make_chunk("a", completion_tokens=1, finish_reason="length")),
        (1, 1, make_chunk("b", completion_tokens=1)),
        (1, 1, make_chunk("c", completion_tokens=2, finish_reason="length", cached_tokens=2)),
    ]
    chunks = await stream(plan, items)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


async def test_whole_response_is_a_text_completion():
    plan = make_plan("completion")
    response = await whole(plan, single_prompt(sample_chunks([" upon", " a"], stop_reason=" time")))
    assert response == {
        "id": plan.request_id,
        "object": "text_completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [choice(0, " upon a", "stop", " time")],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        "system_fingerprint": None,
    }
    Completion.model_validate(response)


async def test_whole_response_with_echo_prefixes_each_choice_with_its_prompt():
    plan = make_plan("completion", prompts=TWO_PROMPTS, echo=True)
    items = [
        (1, 1, make_chunk(" time", finish_reason="length")),
        (0, 0, make_chunk(" more", finish_reason="length")),
    ]
    response = await whole(plan, items)
    assert [c["text"] for c in response["choices"]] == ["Once more", "Twice upon time"]
    assert response["usage"]["prompt_tokens"] == 5


async def test_whole_response_logprobs_offsets_start_at_zero():
    plan = make_plan("completion", logprobs=True)
    items = single_prompt(
        [
            make_chunk("ab", completion_tokens=1, logprobs=[TokenLogprob(1, "ab", -0.5)]),
            make_chunk(
                "c",
                completion_tokens=2,
                finish_reason="stop",
                logprobs=[TokenLogprob(2, "c", -1.0)],
            ),
        ]
    )
    response = await whole(plan, items)
    assert response["choices"][0]["logprobs"] == {
        "tokens": ["ab", "c"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{}, {}],
        "text_offset": [0, 2],
    }
    Completion.model_validate(response)
