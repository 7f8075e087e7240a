"""The Triton attention backend and layer kernels in the engine, through Triton's interpreter.

The interpreter has to be chosen before triton is first imported, so the engine runs in a
child process (interpreted_run.py) with TRITON_INTERPRET=1; this test judges its results:
the backend's output and cache writes against the PyTorch backend on one mixed batch, and
greedy tokens (fp32) through the whole engine with each backend, token for token, including
decode steps served by DecodeGraphs (static buffers, padded rows; replayed eagerly here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ARCHS = ("llama", "qwen3")  # qwen3 adds the per-head q/k RMSNorm
ATTENTION_KERNELS = {"paged_decode_attention", "paged_prefill_attention", "reshape_and_cache"}
LAYER_KERNELS = {"rms_norm", "fused_add_rms_norm", "apply_rotary_embedding", "silu_and_mul"}


@pytest.fixture(scope="module")
def interpreted(checkpoints) -> dict:
    args = [f"{arch}={checkpoints.get(arch)}" for arch in ARCHS]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tests.engine.attention.interpreted_run", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@pytest.mark.slow
def test_backend_matches_torch_backend_on_a_mixed_batch(interpreted):
    attention = interpreted["attention"]
    assert attention["output_shape_equal"]
    assert attention["output_max_abs_diff"] < 1e-5
    # The KV write is a copy: exact.
    assert attention["k_cache_max_abs_diff"] == 0.0
    assert attention["v_cache_max_abs_diff"] == 0.0


# The runs each checkpoint goes through (interpreted_run.py): the first architecture all of
# them, the others those where what they add meets a kernel.
KERNEL_RUNS = ("triton", "triton+layers", "triton+layers+graphs")
RUNS = [
    (arch, run)
    for arch in ARCHS
    for run in KERNEL_RUNS
    if arch == ARCHS[0] or run == "triton+layers"
]


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "run"), RUNS)
def test_engine_greedy_tokens_equal_torch_backend(interpreted, arch, run):
    expected = interpreted["tokens"][arch]["torch"]
    got = interpreted["tokens"][arch][run]
    assert set(got) == set(expected)
    for name, tokens in expected.items():
        assert len(tokens) == 8, name
        position = first_divergence(got[name], tokens)
        assert position is None, f"{run} {arch} prompt {name!r} diverges at token {position}"


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "run"), RUNS)
def test_each_run_used_the_kernels_it_claims(interpreted, arch, run):
    calls = interpreted["kernel_calls"]
    assert calls["torch"][arch] == {}
    # On CPU the layers keep their PyTorch path even with the triton attention backend.
    expected = ATTENTION_KERNELS if run == "triton" else ATTENTION_KERNELS | LAYER_KERNELS
    assert set(calls[run][arch]) == expected
    layers = calls["triton+layers"][arch]
    if run == "triton+layers+graphs":
        # Replayed decode steps run the same kernels, once per step, as eager ones.
        assert calls[run][arch] == layers
    # Every layer of every step writes its K/V once.
    assert calls[run][arch]["reshape_and_cache"] == layers["reshape_and_cache"]


@pytest.mark.slow
def test_the_prefix_hit_request_really_reused_cached_blocks(interpreted):
    # Two full 16-token blocks of "chunked" served the "prefix-hit" prompt from the cache, so
    # its prefill ran over cached context (the case the prefill kernel reads from the cache).
    assert interpreted["prefix_hit_cached_tokens"] == 32


@pytest.mark.slow
def test_graph_run_served_decodes_from_padded_static_buffers(interpreted):
    sizes = interpreted["replayed_sizes"]
    assert sizes, "no decode step went through DecodeGraphs"
    # Captured sizes are 1, 2, 4: a batch of 3 replays the size-4 forward with one padded row.
    assert 3 in sizes and max(sizes) <= 4, sizes
