"""Cache-aware routing across replicas against the shared stream (issue 26, part 3).

Real processes: a private Redis and ``--replicas`` engines (``python -m engine``) of one tiny
random-weight llama, driven through the engine's Redis interface (``EngineClient``, as an API
process does). The trace: ``--tenants`` tenants, each with its own ``--system``-token system
prompt and its own server-side salt, hold a conversation of ``--turns`` turns at once (each
turn: the whole history plus a short user message, ``--output`` tokens back, then
``--think`` s before the next turn). Runs, fresh engines each:

1. one replica with the whole cluster's batch and KV cache (``--max-num-seqs`` times
   ``--replicas``: the CPU KV budget is capped at what the batch can use): the prefix-hit
   rate one cache reaches on this trace when nothing has to be evicted (once);
2. then ``--rounds`` rounds of two runs each, in alternating order (shared first in odd
   rounds, routed first in even ones), so that a machine whose speed drifts favours neither:
   the replicas through the shared stream only (``prefix_routing=False``: work stealing),
   and the replicas with the prefix router.

Prints each round's TTFT p50 ratio and, over all rounds, TTFT p50/p99, throughput, the
cluster's prefix-hit rate (engine counters) and the max/min load over replicas (prompt tokens
each computed or reused, from the engines' status records), and the ratios the issue asks
for, the TTFT ratio as the median of the rounds'; then, per mode, the TTFT p50 of the turns
that found at least half their prompt cached where they ran and of those that did not (the
ratio is the gap between the two, weighted by each mode's share of hits). ``--record``
appends them to docs/benchmarks.md.

    .venv/bin/python bench/prefix_routing.py
    .venv/bin/python bench/prefix_routing.py --rounds 5 --record
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import median, percentile  # noqa: E402

MODEL = "routing-bench"


class NoText:
    """Token ids only: the bench measures timing, not text."""

    def decode(self, ids, *, skip_special_tokens=True):
        return "x" * len(ids)


async def conversation(
    client, args, tenant: int, vocab: int, ttfts: list[float], cached: list[bool]
) -> int:
    """One tenant's turns; returns the tokens it sent and received. Each turn's TTFT goes to
    ``ttfts`` and, at the same index of ``cached``, whether at least half its prompt was cached
    where it ran (its first chunk's ``cached_tokens``)."""
    from inference.transport.engine_client import EngineRequest, SamplingOptions

    rng = random.Random(tenant)
    history = [rng.randrange(3, vocab) for _ in range(args.system)]
    sampling = SamplingOptions(temperature=0.0, max_tokens=args.output, ignore_eos=True)
    tokens = 0
    await asyncio.sleep(rng.random() * args.think)  # tenants do not start in lockstep
    for _ in range(args.turns):
        history += [rng.randrange(3, vocab) for _ in range(args.user)]
        request = EngineRequest.build(
            model=MODEL,
            prompt_token_ids=history,
            sampling=sampling,
            cache_salt=f"salt-{tenant}",
            tenant=f"tenant-{tenant}",
            request_id=uuid.uuid4().hex,
        )
        start, first, cached_tokens = time.monotonic(), None, 0
        async for chunk in client.generate(request, NoText()):
            if chunk.token_ids and first is None:
                first, cached_tokens = time.monotonic() - start, chunk.cached_tokens
            history += chunk.token_ids
        ttfts.append(first or 0.0)
        cached.append(2 * cached_tokens >= len(request.message.prompt_token_ids))
        tokens += len(request.message.prompt_token_ids) + args.output
        await asyncio.sleep(args.think)
    return tokens


async def drive(url: str, prefix: str, args, vocab: int, *, routing: bool) -> dict:
    from inference.transport.engine_client import EngineClient

    client = EngineClient(
        url, prefix=prefix, silence_timeout=600.0, max_waiting=10**6, prefix_routing=routing
    )
    before = await engine_counters(client)
    ttfts: list[float] = []
    cached: list[bool] = []  # per turn, as in ttfts
    start = time.monotonic()
    tokens = await asyncio.gather(
        *[conversation(client, args, t, vocab, ttfts, cached) for t in range(args.tenants)]
    )
    elapsed = time.monotonic() - start
    await asyncio.sleep(1.5)  # the engines' next status records hold the run's counters
    after = await engine_counters(client)
    await client.close()
    queries = sum(after[e]["queries"] - before[e]["queries"] for e in after)
    hits = sum(after[e]["hits"] - before[e]["hits"] for e in after)
    loads = [after[e]["queries"] - before[e]["queries"] for e in after]
    return {
        "ttfts": ttfts,
        "cached": cached,
        "throughput": sum(tokens) / elapsed,
        "elapsed": elapsed,
        "hit_rate": hits / max(1, queries),
        "loads": loads,
    }


async def engine_counters(client) -> dict[str, dict[str, int]]:
    statuses = await client.live_engines(MODEL)
    return {
        s.engine_id: {"queries": s.prefix_cache_queries, "hits": s.prefix_cache_hits}
        for s in statuses
    }


def run(
    workdir: Path,
    model_path: str,
    args,
    vocab: int,
    *,
    replicas: int,
    routing: bool,
    max_num_seqs: int,
):
    from controlplane.launcher.stack import Stack

    name = f"r{replicas}-{'routed' if routing else 'shared'}"
    prefix = f"routebench{name}{uuid.uuid4().hex[:4]}"
    stack = Stack(workdir / name, redis_prefix=prefix)
    url = stack.start_redis()
    try:
        for i in range(replicas):
            stack.start_engine(
                model_path,
                MODEL,
                name=f"engine-{i}",
                wait=False,
                engine_id=f"replica{i}",
                device="cpu",
                dtype="float32",
                max_num_seqs=max_num_seqs,
                fixed_cpu_threads=args.fixed_engine_threads,
                nice=args.engine_nice,
            )
        stack.wait_until(
            lambda: live_count(url, prefix) == replicas, timeout=300, what=f"{replicas} engines"
        )
        result = asyncio.run(drive(url, prefix, args, vocab, routing=routing))
    finally:
        stack.stop()
    print(f"{name} done in {result['elapsed']:.1f} s", flush=True)
    return result


def live_count(url: str, prefix: str) -> int:
    import redis

    from controlplane.common.engine_statuses import read_engine_statuses
    from engine.protocol import Keys

    with redis.Redis.from_url(url) as client:
        return len(read_engine_statuses(client, Keys(prefix), model=MODEL))


def pooled(runs: list[dict]) -> dict:
    """Several runs of one mode as one: their samples together, their rates averaged."""
    return {
        "ttfts": [t for r in runs for t in r["ttfts"]],
        "cached": [c for r in runs for c in r["cached"]],
        "throughput": statistics.mean(r["throughput"] for r in runs),
        "hit_rate": statistics.mean(r["hit_rate"] for r in runs),
        # The most uneven round's loads: replicas are not matched across rounds.
        "loads": max((r["loads"] for r in runs), key=load_spread),
    }


def load_spread(loads: list[int]) -> float:
    return max(loads) / max(1, min(loads))


def round_ratios(shared_runs: list[dict], routed_runs: list[dict]) -> list[float]:
    """Each round's TTFT p50, shared stream over routed."""
    return [
        statistics.median(shared["ttfts"]) / statistics.median(routed["ttfts"])
        for shared, routed in zip(shared_runs, routed_runs, strict=True)
    ]


def labelled(single: dict, shared: dict, routed: dict, replicas: int) -> list[tuple[str, dict]]:
    """Each run with its row label in the report's tables."""
    return [
        ("1 replica", single),
        (f"{replicas} replicas, shared stream", shared),
        (f"{replicas} replicas, prefix router", routed),
    ]


def hit_and_miss_lines(single: dict, shared: dict, routed: dict, replicas: int) -> list[str]:
    """TTFT p50 of the turns whose prompt was mostly cached where they ran, and of the others:
    the TTFT ratio is the gap between the two, weighted by each mode's share of hits."""
    lines = [
        "| run | turns with their prefix cached | TTFT p50 | turns without | TTFT p50 |",
        "|---|---|---|---|---|",
    ]
    for label, r in labelled(single, shared, routed, replicas):
        cells = []
        for hit in (True, False):
            values = [t for t, c in zip(r["ttfts"], r["cached"], strict=True) if c == hit]
            p50 = f"{statistics.median(values) * 1000:.0f} ms" if values else "-"
            cells += [f"{len(values)} ({len(values) / max(1, len(r['ttfts'])):.0%})", p50]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return lines


def report(
    single: dict, shared_runs: list[dict], routed_runs: list[dict], replicas: int
) -> list[str]:
    shared, routed = pooled(shared_runs), pooled(routed_runs)
    ratios = round_ratios(shared_runs, routed_runs)
    lines = [
        "| run | TTFT p50 | TTFT p99 | throughput | prefix-hit rate | max/min replica load |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in labelled(single, shared, routed, replicas):
        spread = load_spread(r["loads"])
        lines.append(
            f"| {label} | {statistics.median(r['ttfts']) * 1000:.0f} ms | "
            f"{percentile(r['ttfts'], 0.99) * 1000:.0f} ms | {r['throughput']:.0f} tok/s | "
            f"{r['hit_rate']:.1%} | {spread:.2f} |"
        )
    lines += ["", *hit_and_miss_lines(single, shared, routed, replicas)]
    ttft_gain = median(ratios)
    hit_ratio = routed["hit_rate"] / single["hit_rate"]
    throughput = routed["throughput"] / shared["throughput"]
    spread = load_spread(routed["loads"])
    each = ", ".join(f"{r:.2f}" for r in ratios)
    checks = [
        (f"TTFT p50, shared / routed = {ttft_gain:.2f} (rounds: {each})", ">= 2", ttft_gain >= 2),
        (f"prefix-hit rate, routed / 1 replica = {hit_ratio:.2f}", ">= 0.90", hit_ratio >= 0.9),
        (f"throughput, routed / shared = {throughput:.2f}", ">= 1.00", throughput >= 1.0),
        (f"max/min replica load, routed = {spread:.2f}", "<= 1.5", spread <= 1.5),
    ]
    lines += ["", "| ratio | goal | holds |", "|---|---|---|"]
    lines += [f"| {text} | {goal} | {'yes' if ok else 'NO'} |" for text, goal, ok in checks]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint dir (default: make one of --size)")
    parser.add_argument("--size", default="tiny", help="random llama to make: tiny or small")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--tenants", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--system", type=int, default=1000, help="system prompt tokens")
    parser.add_argument("--user", type=int, default=24, help="tokens per user message")
    parser.add_argument("--output", type=int, default=16, help="tokens per answer")
    parser.add_argument("--think", type=float, default=0.5, help="seconds between turns")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument(
        "--fixed-engine-threads",
        action="store_true",
        help="the engines' --fixed-cpu-threads: every step on all their threads, even while "
        "the other replicas use the cores (default: fewer then)",
    )
    parser.add_argument(
        "--engine-nice",
        type=int,
        help="the engines' --nice (default: 5 on a CPU, below the client and Redis; 0: theirs)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating shared/routed rounds (default 3)"
    )
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record
    from engine.model_config import ModelConfig

    workdir = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    model_path = args.model
    if model_path is None:
        from engine.tooling.demo.checkpoint import make_checkpoint

        model_path = str(make_checkpoint(workdir / f"llama-{args.size}", size=args.size))
    vocab = ModelConfig.from_pretrained(model_path).vocab_size
    machine = machine_line()
    print(machine)
    seqs = args.max_num_seqs
    whole = seqs * args.replicas
    single = run(workdir, model_path, args, vocab, replicas=1, routing=False, max_num_seqs=whole)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for number in range(args.rounds):
        for routing in (False, True) if number % 2 == 0 else (True, False):
            runs[routing].append(
                run(
                    workdir,
                    model_path,
                    args,
                    vocab,
                    replicas=args.replicas,
                    routing=routing,
                    max_num_seqs=seqs,
                )
            )
        shared, routed = runs[False][-1], runs[True][-1]
        ratio = round_ratios([shared], [routed])[0]
        print(
            f"round {number + 1}: TTFT p50 shared / routed = {ratio:.2f} "
            f"({statistics.median(shared['ttfts']) * 1000:.1f} / "
            f"{statistics.median(routed['ttfts']) * 1000:.1f} ms; "
            f"loads routed {load_spread(routed['loads']):.2f}, shared "
            f"{load_spread(shared['loads']):.2f})",
            flush=True,
        )
    lines = report(single, runs[False], runs[True], args.replicas)
    print("\n".join(lines))
    if args.record:
        record(
            "Cache-aware routing across replicas (issue 26, part 3)",
            invocation(),
            machine,
            lines,
        )


if __name__ == "__main__":
    main()
