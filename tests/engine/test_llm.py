"""The offline ``LLM`` API: vLLM-shaped inputs and outputs, tokenizer, stop strings."""

from __future__ import annotations

import random

import pytest

from engine import LLM, SamplingParams
from engine.llm_outputs import DeferredSample, decode_deferred
from engine.text.sample_output import SampleOutputProcessor


@pytest.fixture(scope="module")
def llm(tiny_engine_path):
    return LLM(tiny_engine_path, num_gpu_blocks=256, max_model_len=512)


def test_generate_from_strings_and_token_ids_keeps_order(llm):
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    ids = llm.get_tokenizer().encode("def main():")
    outputs = llm.generate(["def main():", {"prompt_token_ids": ids}], params)
    assert [o.prompt for o in outputs] == ["def main():", None]
    assert outputs[0].prompt_token_ids == ids
    first, second = (o.outputs[0] for o in outputs)
    assert first.token_ids == second.token_ids and len(first.token_ids) == 8
    assert first.text == llm.get_tokenizer().decode(first.token_ids, skip_special_tokens=True)
    assert first.finish_reason == "length"
    assert outputs[1].num_cached_tokens == 0  # prompt shorter than one block


def test_stop_strings_cut_the_text_and_end_the_sample(llm):
    free = llm.generate("The", SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))[0]
    text = free.outputs[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip(), "need a visible stop string"
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, stop=[stop])
    out = llm.generate("The", params)[0].outputs[0]
    assert out.text == text[: text.index(stop)]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert len(out.token_ids) < 16


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_text_decoded_at_the_end_equals_the_text_detokenized_as_tokens_arrive(
    llm, skip_special_tokens
):
    """A sample without stop strings is decoded once, when generate returns; with a stop string
    that never matches, the same tokens go through the incremental detokenizer that streams
    (engine/llm_outputs.py). Sampled at temperature 2 from random weights, the outputs hold
    special tokens and characters split across tokens, and the texts still agree."""
    prompts = [{"prompt_token_ids": [5 + i, 6, 7, 8]} for i in range(12)]

    def run(stop):
        params = SamplingParams(
            temperature=2.0,
            seed=7,
            max_tokens=40,
            ignore_eos=True,
            stop=stop,
            skip_special_tokens=skip_special_tokens,
        )
        return [(o.outputs[0].token_ids, o.outputs[0].text) for o in llm.generate(prompts, params)]

    deferred = run(None)
    streamed = run(["\x00never in any output\x00"])
    assert deferred == streamed
    assert sum(len(text) for _, text in deferred) > 100


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_a_batch_decoded_at_the_end_reads_as_the_incremental_detokenizer(llm, skip_special_tokens):
    """Token lists with special tokens among them and characters cut off at the end, through
    decode_deferred and through the incremental detokenizer, token by token."""
    decoder = llm._text_decoder()
    special = llm.get_tokenizer().all_special_ids
    rng = random.Random(0)
    id_lists = [
        [rng.choice(special) if rng.random() < 0.1 else rng.randrange(1024) for _ in range(n)]
        for n in range(1, 120)
    ]
    params = SamplingParams(skip_special_tokens=skip_special_tokens)
    samples = [DeferredSample(params) for _ in id_lists]
    for sample, ids in zip(samples, id_lists, strict=True):
        sample.token_ids = ids
    decode_deferred(samples, decoder)
    for sample, ids in zip(samples, id_lists, strict=True):
        processor = SampleOutputProcessor(
            decoder,
            stop=None,
            include_stop_str_in_output=False,
            skip_special_tokens=skip_special_tokens,
            min_tokens=0,
        )
        assert sample.text == processor.update(ids, finish_reason="length").text


def test_n_samples_and_logprobs_are_shaped_like_vllm(llm):
    params = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=5, logprobs=1)
    (out,) = llm.generate({"prompt_token_ids": [5, 6, 7, 8]}, params)
    assert [c.index for c in out.outputs] == [0, 1]
    for sample in out.outputs:
        assert len(sample.logprobs) == len(sample.token_ids)
        assert all(tok in lp for tok, lp in zip(sample.token_ids, sample.logprobs, strict=True))
        assert sample.cumulative_logprob == pytest.approx(
            sum(lp[t] for t, lp in zip(sample.token_ids, sample.logprobs, strict=True))
        )


def test_unknown_engine_argument_is_an_error(tiny_engine_path):
    with pytest.raises(ValueError, match="unknown engine argument"):
        LLM(tiny_engine_path, tensor_parallel_size=2)


def test_mismatched_sampling_params_list_is_an_error(llm):
    with pytest.raises(ValueError, match="2 prompts but 1 sampling_params"):
        llm.generate(["a", "b"], [SamplingParams()])


def test_logit_bias_and_allowed_tokens_steer_generation(llm):
    """Greedy text moves where the bias and the allowed list say, and the speculating engine
    (drafts verified by the same sampler) keeps to them too."""
    prompt = {"prompt_token_ids": [5, 6, 7, 8]}
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    free = llm.generate(prompt, greedy)[0].outputs[0].token_ids
    forced = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logit_bias={42: 100})
    assert llm.generate(prompt, forced)[0].outputs[0].token_ids == [42] * 8
    banned = SamplingParams(
        temperature=0, max_tokens=8, ignore_eos=True, logit_bias={free[0]: -100}
    )
    assert llm.generate(prompt, banned)[0].outputs[0].token_ids[0] != free[0]
    allowed = SamplingParams(
        temperature=1.0, seed=1, max_tokens=8, ignore_eos=True, allowed_token_ids=[9, 10, 11]
    )
    assert set(llm.generate(prompt, allowed)[0].outputs[0].token_ids) <= {9, 10, 11}


def test_a_bias_for_a_token_past_the_vocabulary_is_refused(llm):
    vocab = llm.llm_engine.model_config.vocab_size
    with pytest.raises(ValueError, match=f"token id {vocab} .* outside the vocabulary"):
        llm.generate("The", SamplingParams(logit_bias={vocab: 1.0}))


def test_constraints_that_allow_no_token_end_only_that_request_with_the_clients_error(llm):
    # allowed_token_ids holds only EOS, which min_tokens holds back: no token is left. The
    # request ends with an error the API answers as a 400 (error_code); its neighbour in the
    # same steps, sampled or greedy, runs to its end.
    engine = llm.llm_engine
    eos = min(engine.scheduler.eos_token_ids)
    prompt = [5, 6, 7]
    contradictory = dict(max_tokens=4, allowed_token_ids=[eos], min_tokens=3)
    engine.add_request("greedy", prompt, SamplingParams(temperature=0, **contradictory))
    engine.add_request("sampled", prompt, SamplingParams(temperature=1.0, **contradictory))
    engine.add_request("free", prompt, SamplingParams(max_tokens=4, ignore_eos=True))
    last = {}
    while engine.has_unfinished_requests():
        for delta in engine.step():
            last[delta.request_id] = delta
    for rid in ("greedy", "sampled"):
        assert last[rid].error_code == "no_token_allowed"
        assert last[rid].error == (
            "No token can be generated at output position 0: allowed_token_ids and min_tokens "
            "(which holds back the stop tokens) together allow none; loosen one of them."
        )
        assert last[rid].new_token_ids == []
    assert not last["free"].error and last["free"].finish_reason == "length"
