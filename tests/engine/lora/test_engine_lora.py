"""LoRA through the engine: parity with transformers + PEFT, mixed batches, more adapters than
slots, unload, prefix-cache isolation, and the offline ``LLM(...).generate(lora_request=...)``."""

from __future__ import annotations

import shutil

import pytest
import torch

from engine.config import EngineConfig
from engine.llm import LLM
from engine.llm_engine import LLMEngine
from engine.lora.request import LoRARequest
from engine.sampling_params import SamplingParams
from engine.tooling.random_lora import make_random_adapter
from tests.support.engine_runs import run_to_completion

MAX_TOKENS = 10
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
PROMPTS = [[5 + i, 17, 99, 230 + i, 41, 7, 300, 12 + i, 64 + 3 * i] for i in range(8)]


@pytest.fixture(scope="module")
def adapters(base_path, tmp_path_factory):
    """Four random rank-8 adapters of the tiny llama, with B large enough to change tokens."""
    root = tmp_path_factory.mktemp("adapters")
    return [
        make_random_adapter(base_path, root / f"ad{i}", rank=8, seed=i, b_std=0.2) for i in range(4)
    ]


def hf_greedy(base_path, prompt, adapter_path=None, max_new_tokens=MAX_TOKENS):
    # Imported here, not at collection: peft pulls in torch.distributed, dynamo and sympy
    # (about 4 s of CPU), which every test process paid before one of them ran these tests.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).eval()
    if adapter_path is not None:
        model = PeftModel.from_pretrained(model, adapter_path).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
        )
    return out[0, len(prompt) :].tolist()


def make_engine(base_path, **overrides) -> LLMEngine:
    args = dict(model=str(base_path), num_gpu_blocks=128, max_loras=2, max_lora_rank=8)
    args.update(overrides)
    return LLMEngine(EngineConfig(**args))


def run_jobs(engine, jobs, params=GREEDY, tag="r"):
    """Add (prompt, adapter identity) jobs at once, run to completion; tokens in job order."""
    for n, (prompt, adapter) in enumerate(jobs):
        engine.add_request(f"{tag}{n}", prompt, params, adapter=adapter)
    results = run_to_completion(engine)
    return [results[(f"{tag}{n}", 0)]["tokens"] for n in range(len(jobs))]


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen3"])
def test_offline_llm_greedy_matches_peft(arch, checkpoints, tmp_path):
    base = checkpoints.get(arch)
    adapter = make_random_adapter(base, tmp_path / "ad", rank=8, seed=7, b_std=0.2)
    llm = LLM(str(base), num_gpu_blocks=128, max_loras=2, max_lora_rank=8)
    prompt = PROMPTS[1]
    expected = hf_greedy(base, prompt, adapter)
    assert expected != hf_greedy(base, prompt), "the adapter must change the output"
    out = llm.generate(
        {"prompt_token_ids": prompt}, GREEDY, lora_request=LoRARequest("sql", 1, str(adapter))
    )
    assert out[0].outputs[0].token_ids == expected
    # Same prompt without adapter afterwards: the base model's tokens, not the adapter's.
    base_out = llm.generate({"prompt_token_ids": prompt}, GREEDY)
    assert base_out[0].outputs[0].token_ids == hf_greedy(base, prompt)


def test_zero_b_adapter_equals_base(base_path, tmp_path):
    zero = make_random_adapter(base_path, tmp_path / "zero", rank=8, zero_b=True)
    engine = make_engine(base_path)
    identity = engine.load_adapter("zero", str(zero))
    with_zero, base = run_jobs(engine, [(PROMPTS[0], identity), (PROMPTS[0], None)])
    assert with_zero == base == hf_greedy(base_path, PROMPTS[0])


def test_three_adapters_and_base_in_one_batch_match_solo_runs(base_path, adapters):
    engine = make_engine(base_path, max_loras=3)
    ids = [engine.load_adapter(f"ad{i}", str(p)) for i, p in enumerate(adapters[:3])]
    jobs = [(PROMPTS[0], ids[0]), (PROMPTS[1], None), (PROMPTS[2], ids[1]), (PROMPTS[3], ids[2])]
    for n, (prompt, adapter) in enumerate(jobs):
        engine.add_request(f"m{n}", prompt, GREEDY, adapter=adapter)
    mixed: dict[str, list[int]] = {}
    first_step = True
    while engine.has_unfinished_requests():
        for delta in engine.step():
            mixed.setdefault(delta.request_id, []).extend(delta.new_token_ids)
        if first_step:
            # All four run together: one batch mixing three adapters and the base model.
            assert len(engine.scheduler.running) == 4
            info = engine.lora_requests_info()
            assert info["running_lora_adapters"] == ["ad0", "ad1", "ad2"]
            first_step = False
    solo = [run_jobs(engine, [job], tag=f"solo{n}-")[0] for n, job in enumerate(jobs)]
    assert [mixed[f"m{n}"] for n in range(4)] == solo
    assert len({tuple(s) for s in solo}) == 4  # each request really got different weights
    assert solo[0] == hf_greedy(base_path, PROMPTS[0], adapters[0])


def test_mixed_batch_outputs_equal_solo_outputs(base_path, adapters):
    engine = make_engine(base_path, max_loras=4)
    ids = [engine.load_adapter(f"ad{i}", str(p)) for i, p in enumerate(adapters)]
    jobs = [(PROMPTS[i], [ids[0], None, ids[1], ids[2], ids[3], None][i]) for i in range(6)]
    mixed = run_jobs(engine, jobs, tag="mixed")
    solo = [run_jobs(engine, [job], tag=f"solo{n}-")[0] for n, job in enumerate(jobs)]
    assert mixed == solo
    assert mixed[0] == hf_greedy(base_path, PROMPTS[0], adapters[0])


def test_twice_max_loras_adapters_interleaved_all_complete_correctly(base_path, adapters):
    engine = make_engine(base_path, max_loras=2)
    ids = [engine.load_adapter(f"ad{i}", str(p)) for i, p in enumerate(adapters)]
    order = [0, 1, 2, 3, 0, 3, 1, 2]
    jobs = [(PROMPTS[n], ids[a]) for n, a in enumerate(order)]
    for n, (prompt, adapter) in enumerate(jobs):
        engine.add_request(f"i{n}", prompt, GREEDY, adapter=adapter)
    results: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for delta in engine.step():
            results.setdefault(delta.request_id, []).extend(delta.new_token_ids)
        running = {r.adapter for r in engine.scheduler.running if r.adapter is not None}
        assert len(running) <= 2, "never more distinct adapters running than max_loras"
    for n, a in enumerate(order):
        assert results[f"i{n}"] == hf_greedy(base_path, PROMPTS[n], adapters[a]), n


def test_preemption_keeps_adapter_outputs_right(base_path, adapters):
    # 12 KV blocks of 16 tokens for 6 sequences growing to ~50 tokens forces preemption.
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    engine = make_engine(base_path, num_gpu_blocks=12, max_model_len=128)
    ids = [engine.load_adapter(f"ad{i}", str(p)) for i, p in enumerate(adapters[:2])]
    jobs = [(PROMPTS[n], [ids[0], None, ids[1]][n % 3]) for n in range(6)]
    crowded = run_jobs(engine, jobs, params, tag="c")
    assert engine.stats().num_preemptions > 0
    roomy = make_engine(base_path, num_gpu_blocks=256)
    roomy_ids = [roomy.load_adapter(f"ad{i}", str(p)) for i, p in enumerate(adapters[:2])]
    roomy_jobs = [(PROMPTS[n], [roomy_ids[0], None, roomy_ids[1]][n % 3]) for n in range(6)]
    assert crowded == run_jobs(roomy, roomy_jobs, params, tag="r")
    assert engine.lora.slots.held() == []  # every hold was released


def test_prefix_cache_is_not_shared_across_adapters(base_path, adapters):
    engine = make_engine(base_path)
    identity = engine.load_adapter("ad0", str(adapters[0]))
    prompt = list(range(10, 60))  # three full blocks of 16
    engine.add_request("base", prompt, GREEDY)
    run_to_completion(engine)
    engine.add_request("lora", prompt, GREEDY, adapter=identity)
    lora_run = run_to_completion(engine)[("lora", 0)]
    assert lora_run["deltas"][-1].num_cached_tokens == 0
    assert lora_run["tokens"] == hf_greedy(base_path, prompt, adapters[0])
    engine.add_request("lora-again", prompt, GREEDY, adapter=identity)
    again = run_to_completion(engine)[("lora-again", 0)]
    assert again["deltas"][-1].num_cached_tokens == 48  # same adapter: shares its blocks
    assert again["tokens"] == lora_run["tokens"]


def test_unknown_or_invalid_adapters_are_refused(base_path, adapters, tmp_path, checkpoints):
    engine = make_engine(base_path)
    other = engine.load_adapter("ad0", str(adapters[0]))
    engine.unload_adapter("ad0")
    with pytest.raises(ValueError, match="not loaded"):
        engine.add_request("x", PROMPTS[0], GREEDY, adapter=other)
    big = make_random_adapter(base_path, tmp_path / "big", rank=16)
    with pytest.raises(ValueError, match="rank"):
        engine.load_adapter("big", str(big))
    wrong = make_random_adapter(checkpoints.get("llama", "small"), tmp_path / "wrong", rank=4)
    with pytest.raises(ValueError, match=r"shape|size|layers"):
        engine.load_adapter("wrong", str(wrong))
    assert not engine.has_unfinished_requests()


def test_unload_ends_waiting_requests_and_lets_running_ones_finish(base_path, adapters):
    engine = make_engine(base_path, max_num_seqs=1)
    identity = engine.load_adapter("ad0", str(adapters[0]))
    engine.add_request("running", PROMPTS[0], GREEDY, adapter=identity)
    engine.add_request("waiting", PROMPTS[1], GREEDY, adapter=identity)
    engine.step()  # "running" starts; max_num_seqs=1 keeps "waiting" queued
    assert engine.lora_requests_info()["waiting_lora_adapters"] == ["ad0"]
    engine.unload_adapter("ad0")
    results = run_to_completion(engine)
    assert results[("waiting", 0)]["finish"] == "abort"
    assert results[("waiting", 0)]["tokens"] == []
    assert results[("running", 0)]["finish"] == "length"
    expected = hf_greedy(base_path, PROMPTS[0], adapters[0])
    assert results[("running", 0)]["tokens"] == expected[1:]
    assert engine.lora.slots.held() == []
    assert not engine.has_adapter(identity)


def test_lora_request_validation(base_path, adapters):
    with pytest.raises(ValueError, match="lora_int_id"):
        LoRARequest("a", 0, str(adapters[0]))
    llm = LLM(str(base_path), num_gpu_blocks=128, max_loras=2, max_lora_rank=8)
    with pytest.raises(ValueError, match="lora_request entries"):
        llm.generate(
            [{"prompt_token_ids": PROMPTS[0]}] * 2,
            GREEDY,
            lora_request=[LoRARequest("a", 1, str(adapters[0]))],
        )


def test_offline_llm_takes_one_lora_request_per_prompt(base_path, adapters, tmp_path):
    llm = LLM(str(base_path), num_gpu_blocks=128, max_loras=2, max_lora_rank=8)
    copy = shutil.copytree(adapters[0], tmp_path / "ad0")
    first, second = LoRARequest("ad0", 1, str(copy)), LoRARequest("ad1", 2, str(adapters[1]))
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]
    outputs = llm.generate(prompts, GREEDY, lora_request=[first, None, second])
    expected = [
        hf_greedy(base_path, PROMPTS[0], adapters[0]),
        hf_greedy(base_path, PROMPTS[1]),
        hf_greedy(base_path, PROMPTS[2], adapters[1]),
    ]
    assert [o.outputs[0].token_ids for o in outputs] == expected
    # Loaded once: later calls with the same LoRARequest do not read its files again.
    shutil.rmtree(copy)
    again = llm.generate(prompts[:1], GREEDY, lora_request=first)
    assert again[0].outputs[0].token_ids == expected[0]
