"""The engine's host time a step at the GPU benchmark's batch, measured on a CPU.

On a GPU the engine queues a step and prepares the next while the GPU computes (async
scheduling), so a step takes the longer of the two. At bench/gpu_throughput.py's workload
(nano-vllm's: 256 sequences, inputs and outputs of 100 to 1,024 tokens) on the Qwen3-0.6B
shape, the host's part was the longer on the H200 (docs/benchmarks.md): scheduling, building
the step's inputs, reading its tokens and updating 256 requests, in Python. That part barely
depends on the device or the model, so this bench measures it without a GPU: the same
workload through ``engine.LLM`` on the CPU, async steps forced on, with a tiny model of the
Qwen3 family (hidden size 64); the time inside the model's forward pass, its logits and the
sampler is subtracted from the wall time, and what is left, over the steps, is the host's
time a step.

``--against DIR`` runs another checkout of the project (a ``git worktree`` of an older
commit, say) in alternate rounds, each round in a fresh process, and reports the ratio:
the host is shared and noisy, so a change is judged side by side.

    .venv/bin/python bench/host_step.py
    .venv/bin/python bench/host_step.py --against /tmp/base --rounds 3 --record
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(repo: Path, checkpoint: Path, num_seqs: int) -> dict:
    """One round in this process, importing the engine from ``repo``."""
    sys.path.insert(0, str(repo))
    import torch

    from bench.gpu_throughput import TINY_QWEN3_SHAPE, nano_vllm_workload, write_checkpoint
    from engine import LLM, SamplingParams
    from engine.sample.sampler import Sampler
    from engine.worker.model_runner import ModelRunner

    torch.set_num_threads(1)
    if not checkpoint.exists():
        write_checkpoint(TINY_QWEN3_SHAPE, checkpoint, device="cpu")
    device_seconds = [0.0]
    steps = [0]

    def timed(function, count_steps=False):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                device_seconds[0] += time.perf_counter() - start
                steps[0] += count_steps

        return wrapper

    ModelRunner.run_model = timed(ModelRunner.run_model, count_steps=True)
    Sampler.draw = timed(Sampler.draw)
    llm = LLM(
        model=str(checkpoint),
        dtype="float32",
        device="cpu",
        max_model_len=4096,
        max_num_seqs=256,
        max_num_batched_tokens=16384,
        enable_prefix_caching=False,
        attention_backend="torch",
        async_scheduling=True,  # as on a GPU (engine/async_steps.py)
    )
    model = llm.llm_engine.runner.model
    model.compute_logits = timed(model.compute_logits)
    workload = nano_vllm_workload(num_seqs)
    prompts = [{"prompt_token_ids": p} for p in workload.prompts]
    params = [
        SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=n) for n in workload.output_lens
    ]
    warm = prompts[:32]
    llm.generate(warm, [SamplingParams(max_tokens=8, ignore_eos=True)] * len(warm))  # warm-up
    device_seconds[0], steps[0] = 0.0, 0
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    wall = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    host = wall - device_seconds[0]
    return {
        "host_ms_per_step": host * 1e3 / steps[0],
        "steps": steps[0],
        "wall_s": wall,
        "model_s": device_seconds[0],
        "tokens": tokens,
    }


def run_round(repo: Path, checkpoint: Path, num_seqs: int) -> dict:
    from bench.peers import run_worker

    return run_worker(__file__, repo, "--checkpoint", str(checkpoint), "--num-seqs", str(num_seqs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-seqs", type=int, default=256)
    parser.add_argument("--against", type=Path, help="another checkout, run in alternate rounds")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.checkpoint, args.num_seqs)))
        return

    sys.path.insert(0, str(REPO))
    from bench.peers import invocation, machine_line, median, record, tree_commit

    machine = machine_line()
    print(machine)
    trees = {"this checkout": REPO}
    if args.against:
        trees["--against"] = args.against.resolve()
    results: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="host-step-") as tmp:
        checkpoint = Path(tmp) / "qwen3-tiny"
        for number in range(args.rounds):
            order = list(trees.items())
            for name, repo in order if number % 2 == 0 else reversed(order):
                result = run_round(repo, checkpoint, args.num_seqs)
                results[name].append(result)
                print(
                    f"round {number + 1} {name}: host {result['host_ms_per_step']:.3f} ms a step"
                    f" ({result['steps']} steps, wall {result['wall_s']:.1f} s, model"
                    f" {result['model_s']:.1f} s)",
                    flush=True,
                )
    lines = [
        "| tree | host ms a step, per round | median | ratio to this checkout |",
        "|---|---|---|---|",
    ]
    ours = median([r["host_ms_per_step"] for r in results["this checkout"]])
    for name, repo in trees.items():
        values = [r["host_ms_per_step"] for r in results[name]]
        label = f"{name} ({tree_commit(repo)})"
        lines.append(
            f"| {label} | {', '.join(f'{v:.2f}' for v in values)} | {median(values):.2f} "
            f"| {median(values) / ours:.2f} |"
        )
    print("\n".join(lines))
    if args.record:
        title = "Host time a step at 256 sequences, on a CPU (bench/host_step.py)"
        record(title, invocation(), machine, lines)


if __name__ == "__main__":
    main()
