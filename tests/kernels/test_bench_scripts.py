"""The GPU benchmark scripts: fail fast without CUDA; workload, roofline and baselines on CPU;
bench/host_step.py, the host's part of a GPU step measured on a CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def throughput():
    return _load_script("gpu_throughput")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without a GPU")
@pytest.mark.parametrize("script", ["kernels.py", "gpu_throughput.py"])
def test_gpu_scripts_fail_fast_without_cuda(script):
    result = subprocess.run(
        [sys.executable, f"bench/{script}"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert f"{script} needs a CUDA GPU and none is visible" in result.stderr


def test_workload_is_nano_vllms(throughput):
    workload = throughput.nano_vllm_workload()
    assert len(workload.prompts) == len(workload.output_lens) == 256
    assert all(100 <= len(p) <= 1024 for p in workload.prompts)
    assert all(100 <= n <= 1024 for n in workload.output_lens)
    assert all(0 <= t <= 10000 for p in workload.prompts for t in p)
    again = throughput.nano_vllm_workload()
    assert again == workload  # seed 0 always draws the same workload
    assert throughput.nano_vllm_workload(seed=1) != workload


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen3-0.6b", "llama-3.1-8b"])
def test_weight_count_matches_the_transformers_model(throughput, name):
    from transformers import AutoModelForCausalLM

    shape = throughput.MODEL_SHAPES[name]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(throughput.hf_config(shape))
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    step_params, _ = throughput.weight_counts(shape)
    embedding = 0 if shape["tie_word_embeddings"] else shape["vocab_size"] * shape["hidden_size"]
    assert step_params + embedding == total


def test_roofline_counts_weights_per_step_and_live_kv(throughput):
    shape = dict(throughput.MODEL_SHAPES["qwen3-0.6b"])
    workload = throughput.Workload(prompts=[[0] * 10, [0] * 20], output_lens=[2, 3])
    step_params, prefill_params = throughput.weight_counts(shape)
    kv = throughput.kv_bytes_per_token(shape)
    assert kv == 28 * 2 * 8 * 128 * 2
    # step 1: both sequences live (contexts 11 and 21); step 2: only the second (22)
    expected_bytes = 2 * (2 * step_params) + kv * (11 + 21 + 22)
    expected = expected_bytes / 1e12 + 2 * prefill_params * 30 / 1e15
    got = throughput.roofline_seconds(shape, workload, 1e12, 1e15)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
def test_every_system_produces_exactly_the_requested_tokens_on_cpu(throughput, tmp_path):
    """The benchmark's three harnesses, run on CPU with a tiny model of the same family."""
    workload = throughput.nano_vllm_workload(3, 24, 8, min_len=4, max_token_id=1000)
    shape = {**throughput.TINY_QWEN3_SHAPE, "vocab_size": 1024}  # the workload above: ids <= 1000
    path = throughput.write_checkpoint(shape, tmp_path / "tiny", device="cpu")
    expected = workload.num_output_tokens
    assert throughput.run_engine(path, workload, device="cpu")[0] == expected
    assert throughput.run_generate_batch(path, workload, device="cpu")[0] == expected
    assert throughput.run_generate(path, workload, batch_size=2, device="cpu")[0] == expected


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU runs the full benchmark instead")
def test_kernel_benchmark_checks_and_times_every_kernel_on_the_interpreter(triton_ops):
    """bench/kernels.py end to end at toy sizes, so a GPU lease is not spent finding its bugs."""
    bench = _load_script("kernels")
    result = bench.run(bench.SMOKE, device="cpu", dtype=torch.float32, quick=True)
    assert bench.disagreements(result) == []
    triton_rows = {r.kernel.split(" (")[0].split(" ")[0] for r in result.rows if "triton" in r.impl}
    assert triton_rows >= {
        "paged", "rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary",
        "reshape_and_cache", "lora_shrink", "lora_expand",
    }  # fmt: skip
    best = [r for r in result.rows if r.impl.startswith("triton best")]
    assert len(best) == 1 and "the 70% target" in best[0].note
    assert all(r.rel_error is not None for r in result.rows if r.impl == "triton")


@pytest.mark.slow
def test_host_step_bench_reports_the_host_share_of_every_step(tmp_path):
    """bench/host_step.py's round (the part that runs in a fresh process per tree): every
    requested token produced, and the host's time a step positive and below the wall's."""
    command = [sys.executable, "bench/host_step.py", "--worker", str(REPO)]
    result = subprocess.run(
        [*command, "--checkpoint", str(tmp_path / "tiny"), "--num-seqs", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    round_ = json.loads(result.stdout.strip().splitlines()[-1])
    workload = _load_script("gpu_throughput").nano_vllm_workload(3)
    assert round_["tokens"] == workload.num_output_tokens
    assert round_["steps"] >= max(workload.output_lens)  # one token a sequence a step at most
    assert 0 < round_["host_ms_per_step"] * round_["steps"] / 1e3 < round_["wall_s"]
