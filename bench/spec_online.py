"""Speculative decoding under load: output tokens/s through the whole platform at concurrency 64,
with speculation and without, on one server (issue 29: "at concurrency 64 output throughput no
worse than 0.97x without it").

The platform as ``bin/serve`` runs it (bench/served_platform.py: Redis, one engine, Daphne) serves
the demo SmolLM2-135M-Instruct (``--variant``, int4 by default) with ``--max-num-seqs 64``. Each
round sends ``--requests`` streaming chat completions, ``--concurrency`` at a time, through the
official ``openai`` SDK: the code-edit and open-chat prompts of bench/spec_decode.py in turn,
greedy, ``ignore_eos`` so both sides produce the same tokens. The same requests run with the
deployment's speculation and with ``speculative_decoding: false`` (the per-request switch,
docs/api.md), the order alternating from round to round; only the switch differs.

    .venv/bin/python bench/spec_online.py                   # int4, 64 requests, 3 rounds
    .venv/bin/python bench/spec_online.py --rounds 1 --requests 64 --record

Per side: output tokens/s (all requests' completion tokens over the round's wall time), TTFT
and inter-token latency p50, and the drafts accepted; then the median ratio over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL = "smollm2-spec"


def workload(count: int) -> list[str]:
    """``count`` prompts: code edits and open chat in turn (copy-heavy and free-form mixed)."""
    from bench.spec_decode import CHAT_PROMPTS, code_edit_prompts

    code, chat = code_edit_prompts(), CHAT_PROMPTS
    return [
        code[i // 2 % len(code)] if i % 2 == 0 else chat[i // 2 % len(chat)] for i in range(count)
    ]


async def one_request(client, prompt: str, max_tokens: int, speculative: bool) -> dict:
    start = time.monotonic()
    arrivals: list[float] = []
    usage = None
    extra = {"ignore_eos": True}
    if not speculative:
        extra["speculative_decoding"] = False
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra,
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
        if chunk.usage is not None:
            usage = chunk.usage
    if usage is None or not arrivals:
        raise RuntimeError("a stream ended without tokens or usage")
    details = usage.completion_tokens_details
    tokens = usage.completion_tokens
    return {
        "tokens": tokens,
        "ttft": arrivals[0] - start,
        # Per output token after the first (a chunk may carry several accepted drafts).
        "itl": (arrivals[-1] - arrivals[0]) / max(tokens - 1, 1),
        "accepted": (details.accepted_prediction_tokens or 0) if details else 0,
        "rejected": (details.rejected_prediction_tokens or 0) if details else 0,
    }


async def run_side(base_url, key, prompts, concurrency, max_tokens, speculative) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=600)
    gate = asyncio.Semaphore(concurrency)

    async def gated(prompt: str) -> dict:
        async with gate:
            return await one_request(client, prompt, max_tokens, speculative)

    start = time.monotonic()
    results = await asyncio.gather(*[gated(p) for p in prompts])
    wall = time.monotonic() - start
    await client.close()
    tokens = sum(r["tokens"] for r in results)
    return {
        "rate": tokens / wall,
        "ttft": statistics.median(r["ttft"] for r in results),
        "itl": statistics.median(r["itl"] for r in results),
        "accepted": sum(r["accepted"] for r in results),
        "drafted": sum(r["accepted"] + r["rejected"] for r in results),
        "tokens": tokens,
    }


def report(rounds: list[dict], args) -> list[str]:
    def med(side: bool, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    ratios = [r[True]["rate"] / r[False]["rate"] for r in rounds]
    ratio = statistics.median(ratios)
    drafted = sum(r[True]["drafted"] for r in rounds)
    accepted = sum(r[True]["accepted"] for r in rounds)
    lines = [
        f"SmolLM2-135M-Instruct {args.variant}, {args.requests} requests of {args.max_tokens} "
        f"output tokens per side and round, concurrency {args.concurrency}, engine "
        f"--max-num-seqs {args.max_num_seqs}, {len(rounds)} rounds; code edits and open chat "
        "in turn, greedy",
        "",
        "| side | output tok/s per round | median | TTFT p50 | ITL p50 | drafts accepted |",
        "|---|---|---|---|---|---|",
    ]
    for side, name in ((True, "with speculation"), (False, "without")):
        rates = ", ".join(f"{r[side]['rate']:.1f}" for r in rounds)
        acc = f"{accepted} of {drafted}" if side else "-"
        lines.append(
            f"| {name} | {rates} | {med(side, 'rate'):.1f} | {med(side, 'ttft') * 1000:.0f} ms "
            f"| {med(side, 'itl') * 1000:.1f} ms | {acc} |"
        )
    holds = "yes" if ratio >= 0.97 else "NO"
    lines += [
        "",
        "| ratio | goal | holds |",
        "|---|---|---|",
        f"| output tok/s with / without, median of rounds = {ratio:.3f} "
        f"({', '.join(f'{x:.3f}' for x in ratios)}) | >= 0.97 | {holds} |",
    ]
    return lines


def measure(checkpoint: Path, options: dict, prompts: list[str], args) -> list[dict]:
    """Each round's results per side ({True: with, False: without}), on one served platform."""
    from bench.served_platform import served_platform

    def side(s, speculative: bool, max_tokens: int) -> dict:
        return asyncio.run(
            run_side(s.base_url, s.key, prompts, args.concurrency, max_tokens, speculative)
        )

    rounds = []
    with (
        tempfile.TemporaryDirectory(prefix="spec-online-") as tmp,
        served_platform(Path(tmp), checkpoint, model_name=MODEL, engine_options=options) as s,
    ):
        print("platform up; warming up (every prompt once, both sides)", flush=True)
        for speculative in (True, False):
            side(s, speculative, 8)
        for r in range(args.rounds):
            result = {}
            for speculative in (True, False) if r % 2 == 0 else (False, True):
                result[speculative] = side(s, speculative, args.max_tokens)
                print(
                    f"round {r} {'with' if speculative else 'without'}: "
                    f"{result[speculative]['rate']:.1f} tok/s, "
                    f"{result[speculative]['accepted']} drafts accepted",
                    flush=True,
                )
            rounds.append(result)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="int4", help="fp32, int8 or int4")
    parser.add_argument("--requests", type=int, default=64, help="per side and round")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record, var_dir
    from bench.single_stream import demo_checkpoint, parse_variant

    checkpoint = demo_checkpoint(var_dir())
    variant = parse_variant(args.variant)
    options = {"max_num_seqs": args.max_num_seqs, "device": "cpu", "dtype": variant["dtype"]}
    if variant["quantization"]:
        options["quantization"] = variant["quantization"]
    machine = machine_line()
    print(machine, flush=True)
    rounds = measure(checkpoint, options, workload(args.requests), args)
    lines = report(rounds, args)
    print("\n".join(lines))
    if args.record:
        record("Speculative decoding at concurrency 64, through the platform (issue 29)",
               invocation(), machine, lines)  # fmt: skip


if __name__ == "__main__":
    main()
