"""Runs the Triton attention backend through Triton's CPU interpreter; prints JSON results.

Started by test_triton_backend_interpreted.py as
``TRITON_INTERPRET=1 python -m tests.engine.attention.interpreted_run ARCH=PATH ...``: the
interpreter must be chosen before triton is first imported, so it needs its own process.
It reports, for the parent test to judge:
- ``attention``: the largest difference between the Triton and PyTorch backends' outputs and
  KV caches on one mixed batch (decodes at and past block boundaries, a prefix-cached prefill
  chunk, a fresh prompt), fp32;
- ``tokens``: greedy tokens of each tiny checkpoint through the engine with the PyTorch
  backend, the Triton backend, and the Triton backend plus the layer kernels, covering chunked
  prefill mixed with decodes and a prefix-cache hit; ``kernel_calls`` counts each kernel's
  calls per run and checkpoint, so a run that silently fell back to PyTorch shows; the last
  run replays decode steps through DecodeGraphs (eagerly: no CUDA here) and
  ``replayed_sizes`` lists the decode batch sizes it served.
"""

from __future__ import annotations

import collections
import json
import os
import sys

import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    raise SystemExit("run with TRITON_INTERPRET=1 (Triton's CPU interpreter)")

from engine.attention import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.attention.triton_backend import TritonAttentionBackend
from engine.config import EngineConfig
from engine.layers import dispatch
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.worker.cuda_graphs import DecodeGraphs
from tests.support.triton_mode import speed_up_the_interpreter

speed_up_the_interpreter()

KERNEL_NAMES = (
    "paged_decode_attention",
    "paged_prefill_attention",
    "reshape_and_cache",
    "rms_norm",
    "fused_add_rms_norm",
    "apply_rotary_embedding",
    "silu_and_mul",
)
BLOCK = 4
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16


def mixed_batch_differences() -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    # (context length after the step, query tokens this step): decodes first.
    rows = [(1, 1), (9, 1), (8, 8 - 5), (6, 6)]
    num_blocks = 32
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, seq_lens, slots, qsl, next_block = [], [], [], [0], 0
    for seq_len, q_len in rows:
        n = -(-seq_len // BLOCK)
        table = perm[next_block : next_block + n]
        next_block += n
        tables.append(table)
        seq_lens.append(seq_len)
        qsl.append(qsl[-1] + q_len)
        slots += [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(seq_len - q_len, seq_len)]
    width = max(len(t) for t in tables)
    # Padding points at another sequence's block, as a stale table would.
    block_tables = torch.tensor([t + [perm[-1]] * (width - len(t)) for t in tables])
    num_tokens = qsl[-1]
    query = torch.randn(num_tokens, HEADS, HEAD_DIM, generator=gen)
    key = torch.randn(num_tokens, KV_HEADS, HEAD_DIM, generator=gen)
    value = torch.randn(num_tokens, KV_HEADS, HEAD_DIM, generator=gen)
    # The cached prefix holds random K/V already; this step writes the new tokens.
    cache = torch.randn(2, num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen)
    results = {}
    outputs = {}
    for backend in (TorchAttentionBackend(), TritonAttentionBackend()):
        metadata = AttentionMetadata(
            slot_mapping=torch.tensor(slots),
            seq_lens=torch.tensor(seq_lens),
            block_tables=block_tables,
            seq_lens_list=seq_lens,
            query_start_loc=qsl,
            num_decodes=2,
            block_size=BLOCK,
        )
        k_cache, v_cache = cache[0].clone(), cache[1].clone()
        backend.prepare(metadata)
        backend.write_kv(key, value, k_cache, v_cache, metadata)
        out = backend.attend(query, key, value, k_cache, v_cache, metadata, HEAD_DIM**-0.5)
        outputs[backend.name] = (out, k_cache, v_cache)
    (t_out, t_k, t_v), (k_out, k_k, k_v) = outputs["torch"], outputs["triton"]
    results["output_max_abs_diff"] = (t_out - k_out).abs().max().item()
    results["output_shape_equal"] = t_out.shape == k_out.shape
    results["k_cache_max_abs_diff"] = (t_k - k_k).abs().max().item()
    results["v_cache_max_abs_diff"] = (t_v - k_v).abs().max().item()
    return results


def count_kernel_calls() -> collections.Counter:
    """Wrap each kernel in the kernels package with a call counter; returns the counter."""
    import kernels

    calls: collections.Counter = collections.Counter()
    for name in KERNEL_NAMES:
        kernel = getattr(kernels, name)

        def counted(*args, _kernel=kernel, _name=name, **kwargs):
            calls[_name] += 1
            return _kernel(*args, **kwargs)

        setattr(kernels, name, counted)
    return calls


class EagerReplayDecodeGraphs(DecodeGraphs):
    """DecodeGraphs whose "replay" runs the recorded forward eagerly (no CUDA here).

    Everything else is the real thing: static buffers, padding rows (slot -1, length 0),
    attention prepared once with max_model_len as the bound, so a CPU run checks that a
    replayed decode step computes what an eager one does.
    """

    def __init__(self, *args, **kwargs) -> None:
        self.replayed_sizes: list[int] = []
        super().__init__(*args, **kwargs)

    def _capture(self, forward):
        return forward

    def forward(self, input_ids, positions, metadata):
        self.replayed_sizes.append(metadata.num_seqs)
        return super().forward(input_ids, positions, metadata)


def greedy_tokens(path: str, backend: str, graphs: bool = False) -> dict[str, list[int]]:
    engine = LLMEngine(
        EngineConfig(
            model=path,
            dtype="float32",
            device="cpu",
            attention_backend=backend,
            max_num_batched_tokens=24,  # the 40-token prompt is prefilled in chunks
            num_gpu_blocks=64,
            max_model_len=1024,  # > 512: graph decodes run two partitions and the reduce
        )
    )
    runner = engine.runner
    if graphs:
        runner.cuda_graphs = EagerReplayDecodeGraphs(
            runner.model,
            runner.backend,
            runner.kv_caches,
            sizes=[1, 2, 4],
            max_model_len=runner.model_config.max_model_len,
            block_size=runner.block_size,
            device=runner.device,
        )
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    prompts = {
        "short": [7, 8, 9, 10, 11],
        "one-past-block": list(range(20, 37)),
        "chunked": list(range(100, 140)),
    }
    tokens = _run(engine, prompts, params)
    # Same first 32 tokens as "chunked": two full cached blocks, then a fresh suffix.
    tokens |= _run(engine, {"prefix-hit": [*range(100, 132), 5, 6, 7]}, params)
    if graphs:
        REPLAYED_SIZES.extend(runner.cuda_graphs.replayed_sizes)
    return tokens


def _run(engine, prompts, params) -> dict[str, list[int]]:
    for name, prompt in prompts.items():
        engine.add_request(name, prompt, params)
    tokens: dict[str, list[int]] = {name: [] for name in prompts}
    while engine.has_unfinished_requests():
        for delta in engine.step():
            tokens[delta.request_id].extend(delta.new_token_ids)
            if delta.finished:
                CACHED_TOKENS[delta.request_id] = delta.num_cached_tokens
    return tokens


CACHED_TOKENS: dict[str, int] = {}
REPLAYED_SIZES: list[int] = []


# Which checkpoints each run serves. The first checkpoint named on the command line runs in
# all four; the others only where they differ from it: every checkpoint made here has the same
# attention shapes, so the attention kernels alone and the graph replay would repeat the first
# one's interpreted work (about a third of this script's time) for nothing new, while the
# layer kernels meet what each architecture adds (Qwen3's per-head q/k RMSNorm).
EVERY_ARCH_RUNS = ("torch", "triton+layers")
RUNS = ("torch", "triton", "triton+layers", "triton+layers+graphs")


def main() -> None:
    checkpoints = dict(arg.split("=", 1) for arg in sys.argv[1:])  # arch=path ...
    first = next(iter(checkpoints))
    results = {"attention": mixed_batch_differences(), "tokens": {}, "kernel_calls": {}}
    calls = count_kernel_calls()
    for run in RUNS:
        if run == "triton+layers":
            # Route RMSNorm, rotary and SiLU-and-mul through the kernels, as on CUDA.
            dispatch.KERNEL_DEVICE_TYPES = ("cuda", "cpu")
        for arch, path in checkpoints.items():
            if arch != first and run not in EVERY_ARCH_RUNS:
                continue
            calls.clear()
            results["tokens"].setdefault(arch, {})[run] = greedy_tokens(
                path, run.split("+")[0], graphs=run.endswith("graphs")
            )
            results["kernel_calls"].setdefault(run, {})[arch] = dict(calls)
    results["prefix_hit_cached_tokens"] = CACHED_TOKENS["prefix-hit"]
    results["replayed_sizes"] = REPLAYED_SIZES
    print(json.dumps(results))


if __name__ == "__main__":
    main()
