"""The engine on a GPU: Triton kernels and CUDA graphs against transformers and eager decode.

Skipped without CUDA (``pytest -m gpu tests/engine/attention -rA -s`` on a GPU machine).
- fp32: greedy tokens equal transformers' ``generate`` on the same GPU, token for token
  (acceptance 2; the kernels use IEEE fp32 dot products, cuBLAS keeps TF32 off by default).
- bf16: rounding lets the two drift apart; the test prints each prompt's first divergence
  position and fails only if most prompts already differ at the first token (broken wiring).
- CUDA graphs: decode by graph replay gives the same tokens as eager decode, through batch
  sizes that need padding, and the graphs were really replayed.
"""

from __future__ import annotations

import pytest
import torch

from engine.attention import get_attention_backend
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.engine_runs import random_prompts, run_to_completion

pytestmark = pytest.mark.gpu

NEW_TOKENS = 32
ARCHS = ["llama", "llama3", "mistral", "qwen2", "qwen3"]


def engine_greedy(path: str, prompts, dtype: str, **engine_args) -> list[list[int]]:
    engine = cuda_engine(path, dtype, **engine_args)
    return greedy(engine, prompts, [NEW_TOKENS] * len(prompts))


def cuda_engine(path: str, dtype: str, **engine_args) -> LLMEngine:
    """A small engine: 16 sequences at most keeps CUDA-graph capture to five sizes."""
    config = EngineConfig(
        model=path,
        device="cuda",
        dtype=dtype,
        **{
            "max_model_len": 512,
            "num_gpu_blocks": 512,
            "max_num_batched_tokens": 256,
            "max_num_seqs": 16,
            **engine_args,
        },
    )
    return LLMEngine(config)


def greedy(engine: LLMEngine, prompts, max_tokens: list[int]) -> list[list[int]]:
    for i, (prompt, n) in enumerate(zip(prompts, max_tokens, strict=True)):
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        engine.add_request(str(i), prompt, params)
    results = run_to_completion(engine)
    return [results[(str(i), 0)]["tokens"] for i in range(len(prompts))]


def hf_greedy(model, prompts) -> list[list[int]]:
    """Each prompt alone (no padding): transformers' own reference for it."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt], device="cuda")
            out = model.generate(input_ids=ids, generation_config=config)
            outputs.append(out[0, len(prompt) :].tolist())
    return outputs


def hf_model(path: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to("cuda").eval()


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return i
    return None


def test_auto_picks_triton_on_cuda():
    assert get_attention_backend("cuda").name == "triton"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_fp32_greedy_matches_transformers_exactly(checkpoints, arch):
    path = str(checkpoints.get(arch))
    prompts = random_prompts(8, 3, 90, seed=ARCHS.index(arch))
    got = engine_greedy(path, prompts, "float32")
    expected = hf_greedy(hf_model(path, torch.float32), prompts)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"{arch} prompt {i} diverges at token {first_divergence(g, e)}"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_greedy_against_transformers_reports_first_divergence(checkpoints, arch):
    path = str(checkpoints.get(arch))
    prompts = random_prompts(8, 3, 90, seed=ARCHS.index(arch))
    got = engine_greedy(path, prompts, "bfloat16")
    expected = hf_greedy(hf_model(path, torch.bfloat16), prompts)
    positions = [first_divergence(g, e) for g, e in zip(got, expected, strict=True)]
    shown = ["match" if p is None else p for p in positions]
    print(f"\nbf16 {arch}: first divergence per prompt (of {NEW_TOKENS} tokens): {shown}")
    first_token_equal = sum(p != 0 for p in positions)
    assert first_token_equal >= len(prompts) // 2, f"{arch}: {shown}"


@pytest.mark.slow
@pytest.mark.parametrize("speculation", [False, True], ids=["plain", "speculative"])
def test_cuda_graph_decode_equals_eager_decode(checkpoints, speculation):
    """Without speculation the decode batch shrinks one request at a time, 7 -> 1, replaying
    padded graphs of 8, 4, 2, 1. With it (the default) a verify step gives each draft token a
    decode row, so the rows per step, not the requests, pick the graph."""
    path = str(checkpoints.get("llama"))
    prompts = random_prompts(7, 3, 60, seed=1)
    max_tokens = [4, 8, 12, 16, 20, 24, 28]
    options = {"max_num_seqs": 8, "enable_speculative_decoding": speculation}
    graphed = cuda_engine(path, "float32", **options)
    graphs = graphed.runner.cuda_graphs
    assert graphs is not None and graphs.sizes == [1, 2, 4, 8]
    replays = []
    forward = graphs.forward
    graphs.forward = lambda ids, pos, m: replays.append(m.num_seqs) or forward(ids, pos, m)
    with_graphs = greedy(graphed, prompts, max_tokens)

    eager = cuda_engine(path, "float32", **options)
    eager.runner.cuda_graphs = None
    without = greedy(eager, prompts, max_tokens)

    assert with_graphs == without
    assert [len(t) for t in with_graphs] == max_tokens
    assert max(replays) <= 8, replays
    padded = set(replays) - set(graphs.sizes)
    if speculation:
        assert padded, f"no step replayed a padded graph: {replays}"
    else:
        # Finishing requests shrink the batch; odd sizes replay the next captured size.
        assert {5, 3, 1} <= set(replays), replays


PENALTIES = {"repetition_penalty": 1.3, "frequency_penalty": 0.8, "presence_penalty": 0.5}


@pytest.mark.slow
def test_async_steps_on_cuda_give_the_tokens_of_synchronous_steps(checkpoints):
    """Steps queued behind the one in flight, their pending tokens copied on the device and
    their tokens and logprobs copied back behind them (engine/async_steps.py), through
    graph-replayed decodes and eager prefills; penalized rows take their pending token's
    penalties on the device (engine/sample/penalties.py); seeded rows draw from their own
    generators on the device (the inverse-transform draw, engine/sample/sampler.py)."""
    path = str(checkpoints.get("qwen3"))
    prompts = random_prompts(12, 3, 200, seed=4)
    options = {"enable_speculative_decoding": False, "max_num_batched_tokens": 128}

    def run(engine):
        for i, prompt in enumerate(prompts):
            logprobs = 2 if i % 3 == 0 else None
            penalties = PENALTIES if i % 3 == 1 else {}
            # Every fourth row sampled from its own seed through top-k and top-p.
            sampled = {"seed": i, "top_k": 50, "top_p": 0.9} if i % 4 == 3 else {}
            params = SamplingParams(
                temperature=0.8 if sampled else 0.0,
                **sampled,
                max_tokens=5 + 3 * i,
                ignore_eos=True,
                logprobs=logprobs,
                **penalties,
            )
            engine.add_request(str(i), prompt, params)
        results = run_to_completion(engine)
        return [
            (
                results[(str(i), 0)]["tokens"],
                [
                    (lp.token_id, round(lp.logprob, 3), lp.rank, [t for t, _ in lp.top])
                    for d in results[(str(i), 0)]["deltas"]
                    for lp in d.new_logprobs or []
                ],
            )
            for i in range(len(prompts))
        ]

    overlapped = cuda_engine(path, "float32", async_scheduling=True, **options)
    got = run(overlapped)
    synchronous = cuda_engine(path, "float32", async_scheduling=False, **options)
    assert got == run(synchronous)
    assert overlapped.async_steps.num_launched_behind > 0
    assert synchronous.async_steps is None
    assert [len(tokens) for tokens, _ in got] == [5 + 3 * i for i in range(len(prompts))]
    assert len(got[0][1]) == 5 and len(got[3][1]) == 14  # every token has its logprobs
