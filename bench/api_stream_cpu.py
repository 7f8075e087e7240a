"""What streaming costs the API process: its CPU per token sent to clients.

One Daphne process serves every stream of a ``bin/serve`` host, on one event loop: each token
of each stream passes through it (the engine's output read from Redis, detokenized, put in a
chunk, written to the client's socket). Its CPU time per token therefore bounds the tokens per
second one API process can stream, whatever the engine behind it can produce: on a GPU, with a
small model and hundreds of streams, that bound comes before the engine's.

The platform as the API benches start it (private Redis, SQLite, one engine on the tiny
random-weight llama with ``--max-num-seqs`` = ``--streams``, Daphne), then ``--rounds`` rounds
of ``--streams`` concurrent SSE completions of ``--tokens`` tokens each (``ignore_eos``),
read by httpx (no SDK: the client shares these cores). Daphne's and the engine's CPU come
from ``/proc``, over the rounds after a warm-up round.

``--against DIR`` runs another checkout of the project (a ``git worktree`` of an older
commit) in alternate runs, each in a fresh process with a platform of its own, and prints the
ratio of the medians: the machine is shared and noisy, so a change is judged side by side.
``--api-processes 1,2`` instead runs this checkout with each number of API processes
(``bin/serve --api-processes``) in alternate runs: the API CPU a token is then the sum over
the processes, and the table shows the busiest process's share of it (the kernel spreads
connections by a hash, so with N processes an even split is 1/N).

    .venv/bin/python bench/api_stream_cpu.py
    .venv/bin/python bench/api_stream_cpu.py --against /tmp/base --runs 4 --record
    .venv/bin/python bench/api_stream_cpu.py --api-processes 1,2 --runs 4 --record
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "stream-bench"


async def _streams(base_url: str, key: str, vocab: int, args, rounds: int) -> int:
    """``rounds`` rounds of ``args.streams`` concurrent streams; the chunks read."""
    import httpx

    rng = random.Random(0)
    limits = httpx.Limits(max_connections=args.streams + 4)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=600, limits=limits
    ) as client:

        async def one() -> int:
            body = {
                "model": MODEL,
                "prompt": [rng.randrange(3, vocab) for _ in range(args.prompt)],
                "max_tokens": args.tokens,
                "stream": True,
                "ignore_eos": True,
                "temperature": 0.0,
            }
            chunks = 0
            async with client.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code != 200:
                    raise SystemExit(f"HTTP {response.status_code}: {await response.aread()}")
                async for line in response.aiter_lines():
                    chunks += line.startswith("data: {")
            return chunks

        chunks = 0
        for _ in range(rounds):
            chunks += sum(await asyncio.gather(*[one() for _ in range(args.streams)]))
        return chunks


def worker(repo: Path, args) -> dict:
    """One run in ``repo``'s checkout: its platform, a warm-up round, then the measured ones."""
    sys.path.insert(0, str(repo))
    from bench.process_cpu import ProcessCpu
    from bench.served_platform import served_platform
    from engine.model_config import ModelConfig
    from engine.tooling.demo.checkpoint import make_checkpoint

    workdir = Path(tempfile.mkdtemp(prefix="api-stream-cpu-"))
    checkpoint = make_checkpoint(workdir / "llama-tiny", size="tiny")
    vocab = ModelConfig.from_pretrained(str(checkpoint)).vocab_size
    options = {"max_num_seqs": args.streams}
    # Only when asked: an older checkout's served_platform (--against) has no such argument.
    several = {"api_processes": args.api_processes} if args.api_processes != 1 else {}
    with served_platform(
        workdir, checkpoint, model_name=MODEL, engine_options=options, **several
    ) as p:
        asyncio.run(_streams(p.base_url, p.key, vocab, args, 1))
        processes = getattr(p, "api", [p.daphne])
        cpu = ProcessCpu({"engine": p.engine.pid} | {f"api{c.pid}": c.pid for c in processes})
        mark, began = cpu.mark(), time.monotonic()
        chunks = asyncio.run(_streams(p.base_url, p.key, vocab, args, args.rounds))
        elapsed = time.monotonic() - began
        used = cpu.since(mark)
    engine = used.pop("engine")
    api = list(used.values())
    tokens = args.rounds * args.streams * args.tokens
    return {
        "api_us_per_token": sum(api) / tokens * 1e6,
        "busiest_api_share": max(api) / max(sum(api), 1e-9),
        "engine_us_per_token": engine / tokens * 1e6,
        "chunks_per_token": chunks / tokens,
        "tokens_per_s": tokens / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per stream")
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per checkout")
    parser.add_argument("--against", type=Path, help="another checkout, run in alternation")
    parser.add_argument(
        "--api-processes",
        default="1",
        help="API processes; several, comma separated (1,2): each run in alternation",
    )
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.api_processes = int(args.api_processes)
        print(json.dumps(worker(args.worker, args)))
        return

    sys.path.insert(0, str(REPO))
    from bench.peers import invocation, machine_line, median, record, run_worker, tree_commit

    machine = machine_line()
    print(machine, flush=True)
    argv = [f"--{name}={getattr(args, name)}" for name in ("streams", "tokens", "prompt", "rounds")]
    counts = [int(n) for n in args.api_processes.split(",")]
    if args.against and len(counts) > 1:
        parser.error("--against compares checkouts at one --api-processes")
    # Each variant: a checkout and a number of API processes.
    variants = {f"this checkout, {n} API process(es)": (REPO, n) for n in counts}
    if args.against:
        variants[f"--against, {counts[0]} API process(es)"] = (args.against.resolve(), counts[0])
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for number in range(args.runs):
        order = list(variants.items())
        for name, (repo, processes) in order if number % 2 == 0 else reversed(order):
            # The flag only where needed: an older checkout (--against) may not know it.
            extra = [f"--api-processes={processes}"] if processes != 1 else []
            result = run_worker(__file__, repo, *argv, *extra)
            results[name].append(result)
            print(
                f"run {number + 1} {name}: API {result['api_us_per_token']:.1f} us a token "
                f"(busiest process {result['busiest_api_share']:.0%}), "
                f"engine {result['engine_us_per_token']:.1f} us, "
                f"{result['tokens_per_s']:.0f} tokens/s",
                flush=True,
            )
    first = next(iter(variants))
    ours = median([r["api_us_per_token"] for r in results[first]])
    lines = [
        "| tree | API CPU a token (us), per run | median | ratio to the first row | "
        "busiest API process's share | one API process's ceiling | chunks a token |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (repo, _) in variants.items():
        values = [r["api_us_per_token"] for r in results[name]]
        chunks = median([r["chunks_per_token"] for r in results[name]])
        share = median([r["busiest_api_share"] for r in results[name]])
        lines.append(
            f"| {name} ({tree_commit(repo)}) | {', '.join(f'{v:.1f}' for v in values)} | "
            f"{median(values):.1f} | {median(values) / ours:.2f} | {share:.0%} | "
            f"{1e6 / median(values):,.0f} tokens/s | {chunks:.2f} |"
        )
    print("\n".join(lines))
    if args.record:
        title = "API CPU per streamed token (bench/api_stream_cpu.py)"
        record(title, invocation(), machine, lines)


if __name__ == "__main__":
    main()
