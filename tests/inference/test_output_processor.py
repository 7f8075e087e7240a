"""Engine deltas to client text: detokenization across tokens, stop strings, per-sample counts."""

from __future__ import annotations

import pytest

from engine import protocol
from engine.protocol import SamplingOptions
from engine.text.tokenizer import ChatTokenizer
from inference.transport.engine_request import EngineRequest, OutputOptions
from inference.transport.output_processor import RequestOutputProcessor, TokenLogprob, TokenTexts

PROMPT = [44, 402, 351]  # "Hello"
IM_END = "<|im_end|>"


@pytest.fixture(scope="module")
def tokenizer(tiny_llama) -> ChatTokenizer:
    return ChatTokenizer(tiny_llama)


@pytest.fixture
def processor(tokenizer):
    def make(*, num_samples=1, min_tokens=0, stop=None, include_stop=False, skip_special=True):
        return RequestOutputProcessor(
            EngineRequest.build(
                model="m",
                prompt_token_ids=PROMPT,
                sampling=SamplingOptions(n=num_samples, min_tokens=min_tokens),
                output=OutputOptions(
                    stop=tuple(stop or ()),
                    include_stop_str_in_output=include_stop,
                    skip_special_tokens=skip_special,
                ),
            ),
            tokenizer,
        )

    return make


def delta(token_ids, *, index=0, finish_reason=None, **fields) -> protocol.RequestDelta:
    return protocol.RequestDelta(
        request_id="r",
        index=index,
        new_token_ids=list(token_ids),
        finish_reason=finish_reason,
        **fields,
    )


def one_by_one(outputs, token_ids, *, index=0, finish_reason="length"):
    """Feed one token per delta, the last one finishing; the chunks that came out."""
    chunks = []
    for i, token_id in enumerate(token_ids):
        last = i == len(token_ids) - 1
        chunk = outputs.process(
            delta([token_id], index=index, finish_reason=finish_reason if last else None)
        )
        if chunk is not None:
            chunks.append(chunk)
    return chunks


def text_of(chunks) -> str:
    return "".join(c.text for c in chunks)


# Detokenization -----------------------------------------------------------------------------


def test_multibyte_characters_split_across_tokens_arrive_whole(processor, tokenizer):
    text = "naïve 日本語 🙂"
    ids = tokenizer.encode(text)
    chunks = one_by_one(processor(), ids)
    assert text_of(chunks) == text
    assert all("\ufffd" not in c.text for c in chunks)
    assert any(c.text == "" for c in chunks)  # tokens holding half a character show nothing yet
    assert [t for c in chunks for t in c.token_ids] == ids
    assert [c.completion_tokens for c in chunks] == list(range(1, len(ids) + 1))
    assert (chunks[-1].finish_reason, chunks[-1].stop_reason) == ("length", None)


def test_several_tokens_in_one_delta_make_one_chunk(processor, tokenizer):
    ids = tokenizer.encode("Hello world")
    chunk = processor().process(delta(ids, finish_reason="length"))
    assert (chunk.text, chunk.token_ids, chunk.completion_tokens) == ("Hello world", ids, len(ids))


def test_end_of_sequence_token_is_hidden_unless_asked_for(processor, tokenizer):
    ids = [*tokenizer.encode("Hi"), tokenizer.token_to_id(IM_END)]
    hidden = one_by_one(processor(), ids, finish_reason="stop")
    shown = one_by_one(processor(skip_special=False), ids, finish_reason="stop")
    assert (text_of(hidden), text_of(shown)) == ("Hi", f"Hi{IM_END}")
    assert hidden[-1].completion_tokens == 3  # the EOS token still counts


def test_engine_finish_and_stop_token_are_passed_on(processor, tokenizer):
    stop_id = tokenizer.token_to_id(IM_END)
    chunk = processor().process(delta([stop_id], finish_reason="stop", stop_reason=stop_id))
    assert (chunk.text, chunk.finish_reason, chunk.stop_reason) == ("", "stop", stop_id)


# Stop strings -------------------------------------------------------------------------------


def test_stop_string_across_tokens_is_cut_and_never_half_shown(processor, tokenizer):
    ids = tokenizer.encode("alpha beta gamma delta")
    outputs = processor(stop=["a gam"])
    shown, last = "", None
    for token_id in ids:
        chunk = outputs.process(delta([token_id]))
        if last is not None:
            assert chunk is None  # tokens the engine sent before it saw the abort
            continue
        shown += chunk.text
        assert "alpha bet".startswith(shown)
        if chunk.finish_reason:
            last = chunk
    assert shown == "alpha bet"
    assert (last.finish_reason, last.stop_reason) == ("stop", "a gam")
    # Counted up to the token that completed the stop string.
    assert last.completion_tokens == len(tokenizer.encode("alpha beta gam"))


def test_stop_string_kept_when_asked(processor, tokenizer):
    chunks = one_by_one(
        processor(stop=["a gam"], include_stop=True), tokenizer.encode("alpha beta gamma")
    )
    assert text_of(chunks) == "alpha beta gam"


def test_text_held_back_as_a_possible_stop_is_released_at_the_end(processor, tokenizer):
    ids = tokenizer.encode("alpha beta")
    chunks = one_by_one(processor(stop=["a!"]), ids)
    assert text_of(chunks[:-1]) == "alpha bet"  # the final "a" could have started "a!"
    assert text_of(chunks) == "alpha beta"
    assert (chunks[-1].finish_reason, chunks[-1].stop_reason) == ("length", None)


def test_no_stop_string_ends_a_sample_before_min_tokens(processor, tokenizer):
    ids = tokenizer.encode("alpha beta gamma")  # al p h a ' bet' a ...
    assert text_of(one_by_one(processor(stop=["a"]), ids)) == ""  # "al" already matches
    chunks = one_by_one(processor(stop=["a"], min_tokens=5), ids)
    assert text_of(chunks) == "alpha bet"
    assert (chunks[-1].stop_reason, chunks[-1].completion_tokens) == ("a", 6)


def test_stop_string_ending_after_min_tokens_still_stops(processor, tokenizer):
    ids = tokenizer.encode("alpha beta gamma")  # al p h a | ' bet' ...: "a b" ends in token 5
    chunks = one_by_one(processor(stop=["a b"], min_tokens=4), ids)
    # As vLLM does, the stop string that began inside min_tokens and ends after it stops the
    # sample; the text of the first min_tokens tokens was already emitted and stays.
    assert (text_of(chunks), chunks[-1].finish_reason, chunks[-1].stop_reason) == (
        "alpha",
        "stop",
        "a b",
    )


# Samples, logprobs, counts ------------------------------------------------------------------


def test_samples_are_independent(processor, tokenizer):
    outputs = processor(num_samples=2, stop=["\n"])
    first, second = tokenizer.encode("one\ntwo"), tokenizer.encode("uno")
    chunks = {0: [], 1: []}
    for i in range(max(len(first), len(second))):
        for index, ids in ((0, first), (1, second)):
            if i < len(ids):
                last = i == len(ids) - 1
                chunk = outputs.process(
                    delta([ids[i]], index=index, finish_reason="length" if last else None)
                )
                if chunk is not None:
                    chunks[index].append(chunk)
    assert (text_of(chunks[0]), chunks[0][-1].stop_reason) == ("one", "\n")
    assert (text_of(chunks[1]), chunks[1][-1].finish_reason) == ("uno", "length")
    assert {c.index for c in chunks[1]} == {1}
    assert chunks[1][-1].completion_tokens == len(second)
    assert outputs.num_open == 0


def test_logprobs_carry_token_texts(processor, tokenizer):
    ids = tokenizer.encode("Hi")
    lp = [
        protocol.TokenLogprob(ids[0], -0.5, top_ids=[ids[0], 5], top_logprobs=[-0.5, -2.0]),
        protocol.TokenLogprob(ids[1], -0.25),
    ]
    chunk = processor().process(delta(ids, logprobs=lp))
    assert chunk.logprobs == [
        TokenLogprob(ids[0], "H", -0.5, [(ids[0], "H", -0.5), (5, "!", -2.0)]),
        TokenLogprob(ids[1], "i", -0.25, []),
    ]
    assert processor().process(delta(ids)).logprobs is None  # not asked for


def test_prompt_logprobs_carry_token_texts(processor, tokenizer):
    first = protocol.TokenLogprob(402, -1.0, top_ids=[402], top_logprobs=[-1.0])
    chunk = processor().process(
        delta([5], prompt_logprobs=[None, first, protocol.TokenLogprob(351, -2.0)])
    )
    assert chunk.prompt_logprobs == [
        TokenLogprob(PROMPT[0], TokenTexts(tokenizer)(PROMPT[0]), None),  # nothing predicts it
        TokenLogprob(402, "el", -1.0, [(402, "el", -1.0)]),
        TokenLogprob(351, "lo", -2.0, []),
    ]


def test_counts_and_engine_intervals(processor):
    outputs = processor()
    first = outputs.process(delta([5], num_cached_tokens=2))
    assert (first.prompt_tokens, first.cached_tokens, first.queue_time) == (len(PROMPT), 2, None)
    last = outputs.process(
        delta(
            [5],
            finish_reason="length",
            num_prompt_tokens=4,
            queue_time=0.5,
            prefill_time=0.1,
            decode_time=0.3,
        )
    )
    assert (last.prompt_tokens, last.cached_tokens, last.completion_tokens) == (4, 2, 2)
    assert (last.queue_time, last.prefill_time, last.decode_time) == (0.5, 0.1, 0.3)
    assert outputs.process(delta([5])) is None  # the sample has finished


def test_a_finished_request_is_freed_without_the_cycle_collector(processor):
    """A request's output state points at its samples and not back: nothing of it waits for a
    full collection once the request is done (under a flood those ran for tens of milliseconds
    in the API process while no request moved)."""
    import gc

    gc.collect()
    gc.disable()
    try:
        outputs = processor(num_samples=2, stop=["x"])
        for index in (0, 1):
            one_by_one(outputs, [44, 402], index=index)
        del outputs
        assert gc.collect() == 0
    finally:
        gc.enable()
