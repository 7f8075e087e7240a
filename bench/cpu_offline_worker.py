"""One side of bench/cpu_vs_vllm.py's offline comparison, in a process of its own.

Runs under the project's venv (``--system ours``: engine.LLM) or the vLLM peer's
(``--system vllm``: vllm.LLM); imports nothing of the project at module level, so the peer's
interpreter can run it. The model loads once; then every line ``run`` on stdin runs the whole
workload and answers one ``@@result {json}`` line on stdout (the driver alternates the two
sides this way without paying model loads and vLLM's compilation each round). ``quit`` ends it.

Workload file: JSON ``{"prompts": [[ids]...], "output_lens": [n...]}``; greedy, ignore_eos.
``run PATH`` runs the workload in PATH instead (the driver gives every round prompts of its
own, so no round is served from the prefix cache a previous one filled).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.rss import own_peak_rss_mib  # standard library only

RESULT = "@@result "


def _answer(payload: dict) -> None:
    sys.stdout.write(RESULT + json.dumps(payload) + "\n")
    sys.stdout.flush()


def ours(model: str, dtype: str, kv_bytes: int, threads: int | None):
    from engine import LLM, SamplingParams

    llm = LLM(
        model,
        dtype=dtype,
        device="cpu",
        max_model_len=4096,  # as vLLM's side; Qwen3's 40,960 would not fit the KV budget
        cpu_kv_cache_bytes=kv_bytes,
        cpu_threads=threads,
    )

    def generate(prompts, output_lens):
        params = [
            SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in output_lens
        ]
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
        return [list(o.outputs[0].token_ids) for o in outputs]

    return generate


def vllm(model: str, dtype: str, kv_bytes: int, threads: int | None):
    import os

    # vLLM's CPU KV budget is an environment variable in GiB; same budget as ours.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, kv_bytes >> 30)))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model, dtype=dtype, max_model_len=4096, seed=0)

    def generate(prompts, output_lens):
        params = [
            SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in output_lens
        ]
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
        )
        return [list(o.outputs[0].token_ids) for o in outputs]

    return generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", choices=("ours", "vllm"), required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--workload", required=True, type=Path)
    parser.add_argument("--kv-cache-gib", type=int, default=4)
    parser.add_argument("--threads", type=int, help="our engine's torch threads (ours only)")
    args = parser.parse_args()
    workload = json.loads(args.workload.read_text())
    prompts, output_lens = workload["prompts"], workload["output_lens"]
    started = time.perf_counter()
    generate = {"ours": ours, "vllm": vllm}[args.system](
        args.model, args.dtype, args.kv_cache_gib << 30, args.threads
    )
    generate(prompts[:4], [8] * min(4, len(prompts)))  # warm-up: kernels, allocator, compile
    _answer({"ready": True, "load_s": round(time.perf_counter() - started, 1)})
    for line in sys.stdin:
        command, _, path = line.strip().partition(" ")
        if command != "run":
            break
        if path:
            workload = json.loads(Path(path).read_text())
            prompts, output_lens = workload["prompts"], workload["output_lens"]
        start = time.perf_counter()
        tokens = generate(prompts, output_lens)
        seconds = time.perf_counter() - start
        num_tokens = sum(len(t) for t in tokens)
        _answer(
            {
                "seconds": seconds,
                "output_tokens": num_tokens,
                "tok_per_s": num_tokens / seconds,
                "peak_rss_mib": own_peak_rss_mib(),
                "tokens": tokens,
            }
        )


if __name__ == "__main__":
    main()
