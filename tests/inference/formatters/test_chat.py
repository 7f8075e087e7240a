"""chat.completion and chat.completion.chunk objects, exactly as OpenAI clients receive them."""

from __future__ import annotations

from openai.types.chat import ChatCompletion, ChatCompletionChunk

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


async def stream(plan, items) -> list[dict]:
    formatter = formatter_for(plan, GenerationStats())
    return [chunk async for chunk in stream_events(formatter, engine_items(*items))]


async def whole(plan, items) -> dict:
    return await collect_response(formatter_for(plan, GenerationStats()), engine_items(*items))


def envelope(plan, choices: list[dict]) -> dict:
    return {
        "id": plan.request_id,
        "object": "chat.completion.chunk",
        "created": plan.created,
        "model": plan.model,
        "choices": choices,
        "service_tier": "default",
        "system_fingerprint": None,
    }


def delta(index: int, delta: dict, finish_reason=None, **extra) -> dict:
    return {
        "index": index,
        "delta": delta,
        "logprobs": None,
        "finish_reason": finish_reason,
    } | extra


async def test_stream_is_role_then_content_then_finish():
    plan = make_plan()
    chunks = await stream(plan, single_prompt(sample_chunks(["Hel", "lo"], finish_reason="stop")))
    assert chunks == [
        envelope(plan, [delta(0, {"role": "assistant", "content": ""})]),
        envelope(plan, [delta(0, {"content": "Hel"})]),
        envelope(plan, [delta(0, {"content": "lo"})]),
        envelope(plan, [delta(0, {}, "stop", stop_reason=None)]),
    ]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)


async def test_stream_of_n_choices_opens_each_and_finishes_each():
    plan = make_plan(n=2)
    first, second = sample_chunks(["A", "B"], index=0), sample_chunks(["x"], index=1)
    items = [(0, 0, first[0]), (0, 1, second[0]), (0, 0, first[1])]
    chunks = await stream(plan, items)
    choices = [c["choices"] for c in chunks]
    assert choices == [
        [delta(0, {"role": "assistant", "content": ""})],
        [delta(1, {"role": "assistant", "content": ""})],
        [delta(0, {"content": "A"})],
        [delta(1, {"content": "x"})],
        [delta(1, {}, "stop", stop_reason=None)],
        [delta(0, {"content": "B"})],
        [delta(0, {}, "stop", stop_reason=None)],
    ]


async def test_stop_reason_names_the_stop_string_or_token_that_ended_a_choice():
    plan = make_plan(n=2)
    items = [
        (0, 0, make_chunk("done", finish_reason="stop", stop_reason="\n\n")),
        (0, 1, make_chunk("", index=1, finish_reason="stop", stop_reason=7)),
    ]
    finishes = [
        c["choices"][0] for c in await stream(plan, items) if c["choices"][0]["delta"] == {}
    ]
    assert finishes == [
        delta(0, {}, "stop", stop_reason="\n\n"),
        delta(1, {}, "stop", stop_reason=7),
    ]


async def test_a_chunk_without_text_sends_no_content_delta():
    # A token that completes no character yet (half of a multi-byte one) has no text.
    plan = make_plan()
    items = single_prompt(
        [
            make_chunk("", completion_tokens=1),
            make_chunk("é", completion_tokens=2),
            make_chunk("", completion_tokens=3, finish_reason="length"),
        ]
    )
    deltas = [c["choices"][0]["delta"] for c in await stream(plan, items)]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "é"}, {}]


async def test_include_usage_adds_null_usage_everywhere_and_totals_at_the_end():
    plan = make_plan(n=2, include_usage=True)
    items = [
        (0, 0, make_chunk("a", completion_tokens=1, cached_tokens=2)),
        (0, 1, make_chunk("b", index=1, completion_tokens=1, cached_tokens=2)),
        (0, 0, make_chunk("c", completion_tokens=2, finish_reason="length", cached_tokens=2)),
        (0, 1, make_chunk("d", index=1, completion_tokens=2, finish_reason="length")),
    ]
    chunks = await stream(plan, items)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1] == {
        **envelope(plan, []),
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 4,
            "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 2},
        },
    }
    ChatCompletionChunk.model_validate(chunks[-1])


async def test_without_include_usage_no_chunk_has_usage():
    plan = make_plan(stream=True)
    chunks = await stream(plan, single_prompt(sample_chunks(["a", "b"])))
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_continuous_usage_counts_tokens_so_far_on_every_chunk():
    plan = make_plan(include_usage=True, continuous_usage=True)
    chunks = await stream(plan, single_prompt(sample_chunks(["a", "b"], finish_reason="length")))
    so_far = [(c["usage"]["completion_tokens"], c["usage"]["total_tokens"]) for c in chunks]
    # role, "a", "b", finish, then the final usage chunk (no choices).
    assert so_far == [(0, 3), (1, 4), (2, 5), (2, 5), (2, 5)]
    assert chunks[-1]["choices"] == []


async def test_continuous_usage_reports_the_cached_prompt_tokens_on_every_chunk():
    plan = make_plan(include_usage=True, continuous_usage=True)
    items = single_prompt(
        [
            make_chunk("a", completion_tokens=1, cached_tokens=2),
            make_chunk("b", completion_tokens=2, finish_reason="length", cached_tokens=2),
        ]
    )
    chunks = await stream(plan, items)
    # From the first token on (the role chunk comes before the engine said anything).
    cached = [c["usage"]["prompt_tokens_details"]["cached_tokens"] for c in chunks[1:]]
    assert cached == [2, 2, 2, 2]  # "a", "b", finish, the final usage chunk
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)


async def test_logprobs_ride_on_the_content_delta():
    plan = make_plan(logprobs=True)
    entry = TokenLogprob(
        token_id=44, token="Hé", logprob=-0.25, top=[(44, "Hé", -0.25), (9, "x", -2.0)]
    )
    chunks = await stream(
        plan, single_prompt([make_chunk("Hé", logprobs=[entry], finish_reason="stop")])
    )
    assert chunks[1]["choices"][0]["logprobs"] == {
        "content": [
            {
                "token": "Hé",
                "logprob": -0.25,
                "bytes": [72, 195, 169],
                "top_logprobs": [
                    {"token": "Hé", "logprob": -0.25, "bytes": [72, 195, 169]},
                    {"token": "x", "logprob": -2.0, "bytes": [120]},
                ],
            }
        ]
    }
    ChatCompletionChunk.model_validate(chunks[1])


async def test_logprobs_the_client_did_not_ask_for_are_not_sent():
    plan = make_plan(logprobs=False)
    entry = TokenLogprob(token_id=44, token="H", logprob=-0.25)
    chunks = await stream(
        plan, single_prompt([make_chunk("H", logprobs=[entry], finish_reason="stop")])
    )
    assert [c["choices"][0]["logprobs"] for c in chunks] == [None, None, None]


async def test_whole_response_is_a_chat_completion():
    plan = make_plan()
    response = await whole(
        plan, single_prompt(sample_chunks(["Hel", "lo"], finish_reason="length", cached_tokens=1))
    )
    assert response == {
        "id": plan.request_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello", "refusal": None},
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        ],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 1},
        },
        "service_tier": "default",
        "system_fingerprint": None,
    }
    ChatCompletion.model_validate(response)


async def test_whole_response_keeps_each_choice_text_apart_in_order():
    plan = make_plan(n=2)
    first = sample_chunks(["one", " two"], index=0, stop_reason="\n")
    second = sample_chunks(["uno"], index=1, finish_reason="length")
    items = [(0, 1, second[0]), (0, 0, first[0]), (0, 0, first[1])]
    response = await whole(plan, items)
    assert [
        (c["index"], c["message"]["content"], c["finish_reason"], c["stop_reason"])
        for c in response["choices"]
    ] == [
        (0, "one two", "stop", "\n"),
        (1, "uno", "length", None),
    ]
    assert response["usage"]["completion_tokens"] == 3


async def test_whole_response_logprobs_cover_every_token():
    plan = make_plan(logprobs=True)
    tokens = [TokenLogprob(1, "a", -0.5), TokenLogprob(2, "b", -1.5)]
    items = single_prompt(
        [
            make_chunk("a", logprobs=tokens[:1], completion_tokens=1),
            make_chunk("b", logprobs=tokens[1:], completion_tokens=2, finish_reason="stop"),
        ]
    )
    response = await whole(plan, items)
    content = response["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["logprob"], e["top_logprobs"]) for e in content] == [
        ("a", -0.5, []),
        ("b", -1.5, []),
    ]
    ChatCompletion.model_validate(response)
