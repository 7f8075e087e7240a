"""Every generation endpoint through the official openai SDK (sync and async, streaming and not)
against Daphne on a real socket, with a real engine process on the tiny llama checkpoint."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine.text.tokenizer import ChatTokenizer

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "Tell me about lists."}]


def offline_greedy(checkpoint, prompt_token_ids: list[int], max_tokens: int) -> list[int]:
    """The offline engine's greedy tokens for the same prompt ids, in this process."""
    try:
        from engine.llm import LLM
    except ImportError:  # the offline LLM class comes with the engine core; LLMEngine suffices
        LLM = None
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    if LLM is not None:
        out = LLM(model=str(checkpoint)).generate([{"prompt_token_ids": prompt_token_ids}], params)
        return list(out[0].outputs[0].token_ids)
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine

    engine = LLMEngine(EngineConfig(model=str(checkpoint)))
    engine.add_request("offline", prompt_token_ids, params)
    tokens: list[int] = []
    while engine.has_unfinished_requests():
        for delta in engine.step():
            tokens.extend(delta.new_token_ids)
    return tokens


def test_greedy_chat_equals_the_offline_engine(platform):
    tokenizer = ChatTokenizer(platform.checkpoint)
    prompt_ids = tokenizer.encode(tokenizer.render_chat(USER), add_special_tokens=False)
    reply = platform.sdk().chat.completions.create(
        model=platform.chat_model,
        messages=USER,
        max_tokens=24,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    expected_ids = offline_greedy(platform.checkpoint, prompt_ids, 24)
    expected = tokenizer.decode(expected_ids)
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.prompt_tokens == len(prompt_ids)
    assert reply.usage.completion_tokens == len(expected_ids) == 24
    assert reply.choices[0].finish_reason == "length"
    assert reply.object == "chat.completion" and reply.model == platform.chat_model


def test_streamed_chat_equals_non_streamed(platform):
    client = platform.sdk()
    kwargs = dict(model=platform.chat_model, messages=USER, max_tokens=20, temperature=0)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].finish_reason) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    assert len({c.id for c in chunks}) == 1
    # service_tier "flex" runs it in the batch class: the same answer, said to be flex.
    flex = client.chat.completions.create(**kwargs, service_tier="flex")
    assert (whole.service_tier, flex.service_tier) == ("default", "flex")
    assert flex.choices[0].message.content == whole.choices[0].message.content


async def test_async_sdk_stream_and_not(platform):
    client = platform.async_sdk()
    kwargs = dict(model=platform.chat_model, messages=USER, max_tokens=12, temperature=0)
    whole = await client.chat.completions.create(**kwargs)
    stream = await client.chat.completions.create(**kwargs, stream=True)
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == whole.choices[0].message.content
    assert sum(1 for p in parts if p) > 1  # tokens arrived in several chunks
    completion = await client.completions.create(
        model=platform.chat_model, prompt="The list", max_tokens=6, temperature=0
    )
    assert completion.choices[0].finish_reason == "length"
    await client.close()


def test_n_seed_and_max_completion_tokens(platform):
    client = platform.sdk()
    reply = client.chat.completions.create(
        model=platform.chat_model,
        messages=USER,
        n=3,
        max_completion_tokens=7,
        temperature=1.0,
        seed=1234,
        extra_body={"ignore_eos": True},
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert reply.usage.completion_tokens == 21
    again = client.chat.completions.create(
        model=platform.chat_model,
        messages=USER,
        n=3,
        max_completion_tokens=7,
        temperature=1.0,
        seed=1234,
        extra_body={"ignore_eos": True},
    )
    assert [c.message.content for c in again.choices] == [c.message.content for c in reply.choices]


def test_stop_string_cuts_the_text(platform):
    client = platform.sdk()
    kwargs = dict(
        model=platform.chat_model,
        messages=USER,
        max_tokens=30,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    full = client.chat.completions.create(**kwargs).choices[0].message.content
    stop = full[8:11]
    assert stop and stop in full
    cut = client.chat.completions.create(**kwargs, stop=[stop]).choices[0]
    assert cut.message.content == full[: full.index(stop)]
    assert cut.finish_reason == "stop"


def test_chat_logprobs(platform):
    reply = platform.sdk().chat.completions.create(
        model=platform.chat_model,
        messages=USER,
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = reply.choices[0].logprobs.content
    assert len(content) == 5
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    for token in content:
        assert len(token.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert token.logprob == pytest.approx(max(t.logprob for t in token.top_logprobs))
    streamed = platform.sdk().chat.completions.create(
        model=platform.chat_model,
        messages=USER,
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        stream=True,
    )
    tokens = [
        t
        for c in streamed
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content
    ]
    assert [t.token for t in tokens] == [t.token for t in content]
    assert [t.logprob for t in tokens] == pytest.approx([t.logprob for t in content], abs=1e-4)


def test_completions_prompt_forms(platform):
    client = platform.sdk()
    tokenizer = ChatTokenizer(platform.checkpoint)
    ids = tokenizer.encode("The list")
    common = dict(model=platform.chat_model, max_tokens=5, temperature=0)
    by_text = client.completions.create(prompt="The list", **common)
    by_ids = client.completions.create(prompt=ids, **common)
    assert by_ids.choices[0].text == by_text.choices[0].text
    many = client.completions.create(prompt=["The list", "A dict"], n=2, **common)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    assert many.choices[0].text == by_text.choices[0].text
    batch = client.completions.create(prompt=[ids, tokenizer.encode("A dict")], **common)
    assert batch.choices[1].text == many.choices[2].text
    echo = client.completions.create(prompt="The list", echo=True, **common)
    assert echo.choices[0].text == "The list" + by_text.choices[0].text
    with_lp = client.completions.create(prompt="The list", logprobs=2, **common)
    lp = with_lp.choices[0].logprobs
    assert "".join(lp.tokens) == with_lp.choices[0].text
    assert lp.text_offset[0] == 0 and len(lp.top_logprobs[0]) == 2


def test_streamed_completions(platform):
    client = platform.sdk()
    common = dict(
        model=platform.chat_model, prompt=["The list", "A dict"], max_tokens=6, temperature=0
    )
    whole = client.completions.create(**common)
    chunks = list(client.completions.create(**common, stream=True))
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        assert "".join(c.text for c in mine) == whole.choices[index].text
        assert [c.finish_reason for c in mine if c.finish_reason] == ["length"]


def test_models_tokenize_detokenize(platform):
    client = platform.sdk()
    ids = {m.id for m in client.models.list().data}
    assert {platform.chat_model, platform.embed_model} <= ids
    model = client.models.retrieve(platform.chat_model)
    assert model.id == platform.chat_model and model.object == "model"
    limited = openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=platform.limited_key)
    assert [m.id for m in limited.models.list().data] == [platform.chat_model]
    headers = {"Authorization": f"Bearer {platform.api_key}"}
    tokens = httpx.post(
        f"{platform.base_url}/tokenize",
        json={"model": platform.chat_model, "prompt": "Hello, world"},
        headers=headers,
    ).json()
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 2048
    text = httpx.post(
        f"{platform.base_url}/detokenize",
        json={"model": platform.chat_model, "tokens": tokens["tokens"]},
        headers=headers,
    ).json()
    assert text == {"prompt": "Hello, world"}
    chat = httpx.post(
        f"{platform.base_url}/tokenize",
        json={"model": platform.chat_model, "messages": USER},
        headers=headers,
    ).json()
    tokenizer = ChatTokenizer(platform.checkpoint)
    assert chat["tokens"] == tokenizer.encode(tokenizer.render_chat(USER))


def test_health_and_ready(platform):
    assert httpx.get(f"{platform.base_url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{platform.base_url}/ready").status_code == 200
    ready = httpx.get(f"{platform.base_url}/ready", params={"model": platform.chat_model})
    assert ready.status_code == 200
    idle = httpx.get(f"{platform.base_url}/ready", params={"model": "tiny-llama-idle"})
    assert idle.status_code == 503


def test_speculative_decoding_shows_in_usage_and_can_be_turned_off(platform):
    client = platform.sdk()
    # A prompt that repeats itself: prompt lookup proposes drafts the tiny model accepts.
    prompt = list(range(40, 70)) * 3
    common = dict(model=platform.chat_model, prompt=prompt, max_tokens=48, temperature=0)
    fast = client.completions.create(**common, extra_body={"ignore_eos": True})
    plain = client.completions.create(
        **common, extra_body={"ignore_eos": True, "speculative_decoding": False}
    )
    assert fast.choices[0].text == plain.choices[0].text
    details = fast.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0
    assert details.rejected_prediction_tokens >= 0
    assert plain.usage.completion_tokens_details is None
    with pytest.raises(openai.BadRequestError):
        client.completions.create(**common, extra_body={"speculative_decoding": "yes"})


def test_logit_bias_and_allowed_token_ids_through_the_sdk(platform):
    """OpenAI's logit_bias steers the tokens (forces one, bans the greedy choice) in chat and
    completions, and a token id past the vocabulary is a 400 naming the field."""
    client = platform.sdk()
    tokenizer = ChatTokenizer(platform.checkpoint)
    forced = tokenizer.encode(" list")[-1]
    common = dict(model=platform.chat_model, max_tokens=4, temperature=0)
    ignore_eos = {"ignore_eos": True}
    chat = client.chat.completions.create(
        messages=USER, logit_bias={str(forced): 100}, extra_body=ignore_eos, logprobs=True, **common
    )
    assert [t.token for t in chat.choices[0].logprobs.content] == [tokenizer.decode([forced])] * 4
    plain = client.completions.create(
        prompt="The list", logprobs=1, extra_body=ignore_eos, **common
    )
    first = plain.choices[0].logprobs.tokens[0]
    first_id = tokenizer.encode(first)[-1]
    banned = client.completions.create(
        prompt="The list",
        logprobs=1,
        logit_bias={str(first_id): -100},
        extra_body=ignore_eos,
        **common,
    )
    assert banned.choices[0].logprobs.tokens[0] != first
    allowed = [tokenizer.encode(w)[-1] for w in (" a", " b")]
    sampled = client.completions.create(
        prompt="The list",
        n=4,
        seed=3,
        extra_body={**ignore_eos, "allowed_token_ids": allowed},
        **{**common, "temperature": 1.5},
    )
    for choice in sampled.choices:
        assert choice.text.replace(" a", "").replace(" b", "") == ""
    for field, value in (
        ("logit_bias", {str(tokenizer.vocab_size): 5}),
        ("logit_bias", {"1": 101}),
        ("allowed_token_ids", [tokenizer.vocab_size]),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(prompt="The list", extra_body={field: value}, **common)
        assert refused.value.body["param"] == field
    # Constraints that leave no token at all: the client's error (a 400 naming them), not a
    # server error with the grammar's internals (found by fuzzing 2026-11-30).
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            messages=USER,
            response_format={"type": "json_object"},
            extra_body={"allowed_token_ids": allowed},
            **common,
        )
    assert refused.value.code == "no_token_allowed"
    assert "allowed_token_ids and the grammar of the response format" in refused.value.message


def test_echo_with_logprobs_scores_the_prompt_as_eval_harnesses_ask(platform):
    """lm-evaluation-harness and perplexity scripts send echo with logprobs (max_tokens 0 or 1)
    and read the prompt's token logprobs: the first null, each a logprob its top alternatives
    bound, the generated tokens after them as a request without echo gives them."""
    client = platform.sdk()
    tokenizer = ChatTokenizer(platform.checkpoint)
    prompt = "The list of things"
    num_prompt = len(tokenizer.encode(prompt))
    common = dict(model=platform.chat_model, prompt=prompt, logprobs=2, temperature=0)
    scored = client.completions.create(**common, echo=True, max_tokens=0)
    (choice,) = scored.choices
    lp = choice.logprobs
    assert choice.text == prompt and choice.finish_reason == "length"
    assert scored.usage.completion_tokens == 0 and scored.usage.prompt_tokens == num_prompt
    assert len(lp.tokens) == num_prompt and "".join(lp.tokens).endswith("things")
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None and lp.text_offset[0] == 0
    for logprob, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:], strict=True):
        assert logprob <= 0 and len(top) == 2 and logprob <= max(top.values()) + 1e-5

    ignore_eos = {"ignore_eos": True}
    plain = client.completions.create(**common, max_tokens=3, extra_body=ignore_eos)
    echoed = client.completions.create(**common, max_tokens=3, echo=True, extra_body=ignore_eos)
    both = echoed.choices[0].logprobs
    assert echoed.choices[0].text == prompt + plain.choices[0].text
    assert both.token_logprobs[1:num_prompt] == pytest.approx(lp.token_logprobs[1:], abs=1e-4)
    assert both.tokens[num_prompt:] == plain.choices[0].logprobs.tokens
    assert both.token_logprobs[num_prompt:] == pytest.approx(
        plain.choices[0].logprobs.token_logprobs, abs=1e-4
    )
    assert both.text_offset[num_prompt] == len(prompt)

    stream = list(
        client.completions.create(
            **common, max_tokens=3, echo=True, stream=True, extra_body=ignore_eos
        )
    )
    parts = [c.choices[0] for c in stream if c.choices]
    assert "".join(p.text for p in parts) == echoed.choices[0].text
    streamed = [t for p in parts if p.logprobs for t in p.logprobs.tokens]
    assert streamed == both.tokens
    offsets = [o for p in parts if p.logprobs for o in p.logprobs.text_offset]
    assert offsets == both.text_offset
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(**common, max_tokens=0)  # nothing to give without echo
    assert refused.value.body["param"] == "max_tokens"


def test_vllms_prompt_logprobs_score_the_prompt_with_ranks(platform):
    """vLLM's prompt_logprobs (extra body; RL and eval pipelines written for vLLM send it):
    per prompt token, null first, then {token id: logprob, rank, decoded_token} for the
    prompt's own token and its top alternatives, the numbers echo with logprobs gives; on
    every choice of completions, at the top of a chat completion; refused with stream."""
    client = platform.sdk()
    tokenizer = ChatTokenizer(platform.checkpoint)
    prompt = "The list of things"
    ids = tokenizer.encode(prompt)
    common = dict(model=platform.chat_model, prompt=prompt, temperature=0, max_tokens=1)
    echo = client.completions.create(**common, echo=True, logprobs=2).choices[0].logprobs
    answer = client.completions.create(**common, n=2, extra_body={"prompt_logprobs": 2})
    for choice in answer.choices:
        entries = choice.model_extra["prompt_logprobs"]
        assert len(entries) == len(ids) and entries[0] is None
        for i, entry in enumerate(entries[1:], start=1):
            own = entry[str(ids[i])]
            assert own["logprob"] == pytest.approx(echo.token_logprobs[i], abs=1e-4)
            assert own["decoded_token"] == echo.tokens[i] and own["rank"] >= 1
            others = {v["decoded_token"]: v["logprob"] for v in entry.values()}
            for text, logprob in echo.top_logprobs[i].items():
                assert others[text] == pytest.approx(logprob, abs=1e-4)
            ranks = sorted(v["rank"] for k, v in entry.items() if k != str(ids[i]))
            assert ranks in ([1, 2], [1], [2])  # the own token may be one of the two
    # Both ways in one request: each answers with its own number of alternatives.
    both = client.completions.create(
        **common, echo=True, logprobs=1, extra_body={"prompt_logprobs": 2}
    ).choices[0]
    assert all(len(top) == 1 for top in both.logprobs.top_logprobs[1 : len(ids)])
    assert all(len(entry) >= 2 for entry in both.model_extra["prompt_logprobs"][1:])
    chat = client.chat.completions.create(
        model=platform.chat_model, messages=USER, max_tokens=1, extra_body={"prompt_logprobs": 0}
    )
    entries = chat.model_extra["prompt_logprobs"]
    assert len(entries) == chat.usage.prompt_tokens and entries[0] is None
    assert all(len(entry) == 1 for entry in entries[1:])  # the prompt's own token alone
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(**common, stream=True, extra_body={"prompt_logprobs": 1})
    assert refused.value.body["param"] == "prompt_logprobs"
