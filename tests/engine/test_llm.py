"""The offline ``LLM`` API: vLLM-shaped inputs and outputs, tokenizer, stop strings."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams


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
