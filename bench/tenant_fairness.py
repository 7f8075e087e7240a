"""Two tenants on one engine: the fair policy against FIFO (issue 26, part 1).

Real processes: a private Redis and one ``python -m engine`` (``--max-num-seqs 8``) on a tiny
random-weight llama, driven through the engine's Redis interface (``EngineClient``, as an API
process does). Two engines serve the checkpoint under two names: MODEL by a ``fair`` engine,
FIFO_MODEL by an ``fcfs`` one. For each policy:

1. B idle: tenant B sends one short request every ``--interval`` s; its TTFTs. B's client
   runs in a process of its own, as a second API process would.
2. A alone: tenant A sends ``--flood`` requests of ``--prompt`` tokens at once; A's throughput.
3. A's flood again with B sending as in 1 meanwhile: B's TTFTs, A's and total throughput.
   Steps 2 and 3 alternate ``--rounds`` times; B's TTFTs are pooled over the rounds. Each
   round runs both policies, in an order that alternates from round to round, so that whatever
   else the shared machine does at the time falls on both alike (a fresh engine per policy, run
   one after the other, read fair / FIFO throughput 0.87-1.20 on one machine in an hour,
   2026-11-28). The idle engine waits on Redis and takes next to no CPU.
4. Weights: two tenants of weight 1 and 3 each send a backlog at once; the output tokens each
   received while both were still backlogged (fair policy only; FIFO has no weights).

Prints the ratios the issue asks for; with ``--record`` appends them to docs/benchmarks.md.

    .venv/bin/python bench/tenant_fairness.py
    .venv/bin/python bench/tenant_fairness.py --flood 128 --prompt 1000 --record
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

from bench.peers import percentile  # noqa: E402
from bench.tenant_b import TenantB, add_flood_arguments, flood_checks  # noqa: E402

MODEL = "fair-bench"  # served by the fair engine
FIFO_MODEL = "fair-bench-fcfs"  # the same checkpoint, served by the fcfs engine
POLICY_MODELS = {"fair": MODEL, "fcfs": FIFO_MODEL}


class Driver:
    """Sends requests to ``model`` and records when their tokens arrive."""

    def __init__(self, client, tokenizer, vocab: int, seed: int, model: str = MODEL):
        self.client, self.tokenizer, self.vocab, self.model = client, tokenizer, vocab, model
        self.rng = random.Random(seed)
        # (seconds queued in the engine, seconds from scheduled to first token) per request
        self.engine_times: list[tuple[float, float]] = []

    def prompt(self, length: int) -> list[int]:
        # Random tokens: no prefix-cache hits between requests, every prompt token is computed.
        return [self.rng.randrange(3, self.vocab) for _ in range(length)]

    async def one(
        self, tenant: str, prompt: int | list[int], max_tokens: int, weight=1.0, log=None
    ):
        """(TTFT s, output tokens, finish time, first-token time) of one request of ``prompt``
        (token ids, or a length to draw); ``log`` gets (time, tokens) per chunk."""
        from inference.transport.engine_client import EngineRequest, SamplingOptions

        request = EngineRequest.build(
            model=self.model,
            prompt_token_ids=self.prompt(prompt) if isinstance(prompt, int) else prompt,
            sampling=SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
            tenant=tenant,
            weight=weight,
            request_id=uuid.uuid4().hex,
        )
        start, first, tokens = time.monotonic(), None, 0
        async for chunk in self.client.generate(request, self.tokenizer):
            if chunk.token_ids:
                now = time.monotonic()
                first = first if first is not None else now - start
                tokens += len(chunk.token_ids)
                if log is not None:
                    log.append((now, len(chunk.token_ids)))
            if chunk.queue_time is not None:  # the last chunk: the engine's own timings
                self.engine_times.append((chunk.queue_time, chunk.prefill_time or 0.0))
        return first, tokens, time.monotonic(), start + (first or 0.0)

    async def trickle(self, tenant: str, count: int, interval: float, stop=None) -> list[float]:
        """``count`` short requests, one every ``interval`` s (or until ``stop`` is set)."""
        ttfts = []
        for _ in range(count):
            if stop is not None and stop.is_set():
                break
            began = time.monotonic()
            ttft, *_ = await self.one(tenant, 16, 4)
            # (TTFT, its part queued in the engine, its part from scheduled to first token)
            ttfts.append((ttft, *self.engine_times.pop()))
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - began)))
        return ttfts

    async def flood(self, tenant: str, count: int, prompt: int, output: int):
        """``count`` requests at once: (seconds, prompt + output tokens computed)."""
        # Drawn before the clock starts: 128,000 random draws take the event loop about 60 ms,
        # which B's request, sent at the same moment, would wait out in this client.
        prompts = [self.prompt(prompt) for _ in range(count)]
        start = time.monotonic()
        results = await asyncio.gather(*[self.one(tenant, p, output) for p in prompts])
        elapsed = max(r[2] for r in results) - start
        return elapsed, count * prompt + sum(r[1] for r in results)


async def weighted_share(driver: Driver, count: int, output: int) -> tuple[int, int]:
    """Output tokens of tenants of weight 1 and 3 while both were backlogged."""
    logs: dict[str, list] = {"w1": [], "w3": []}
    tasks = {
        name: [
            asyncio.ensure_future(driver.one(name, 32, output, weight=weight, log=logs[name]))
            for _ in range(count)
        ]
        for name, weight in (("w1", 1.0), ("w3", 3.0))
    }
    for group in tasks.values():
        await asyncio.gather(*group)
    # Both are backlogged until the first of them has its last request started (its first
    # token): after that one tenant has nothing waiting and the other takes the free slots.
    window_end = min(max(t.result()[3] for t in group) for group in tasks.values())
    # The first seconds fill the batch from the stream in arrival order; skip them.
    start = min(t for log in logs.values() for t, _ in log)
    window_start = start + (window_end - start) * 0.2
    counts = [
        sum(n for t, n in logs[name] if window_start <= t <= window_end) for name in ("w1", "w3")
    ]
    return counts[0], counts[1]


def _tenant_b_main(url, prefix, model_path, vocab, conn, stop) -> None:
    sys.path.insert(0, str(REPO))
    from engine.text.tokenizer import ChatTokenizer
    from inference.transport.engine_client import EngineClient

    async def serve() -> None:
        client = EngineClient(url, prefix=prefix, silence_timeout=600.0, max_waiting=10**6)
        tokenizer = ChatTokenizer(model_path)
        drivers = {
            m: Driver(client, tokenizer, vocab, seed=1, model=m) for m in POLICY_MODELS.values()
        }
        while (command := await asyncio.to_thread(conn.recv)) is not None:
            count, interval, model = command
            conn.send(await drivers[model].trickle("tB", count, interval, stop))
        await client.close()

    asyncio.run(serve())


async def scenario(url: str, prefix: str, model_path: str, vocab: int, args) -> dict[str, dict]:
    from engine.text.tokenizer import ChatTokenizer
    from inference.transport.engine_client import EngineClient

    client = EngineClient(url, prefix=prefix, silence_timeout=600.0, max_waiting=10**6)
    tokenizer = ChatTokenizer(model_path)
    # One driver of A per policy, on the same seed: each round floods both with the same prompts.
    drivers = {
        p: Driver(client, tokenizer, vocab, seed=0, model=m) for p, m in POLICY_MODELS.items()
    }
    tenant_b = TenantB(_tenant_b_main, url, prefix, model_path, vocab)
    results: dict[str, dict] = {}
    for policy, model in POLICY_MODELS.items():
        await tenant_b.trickle(3, 0.1, model)  # warm-up
        idle = await tenant_b.trickle(args.idle_samples, args.interval, model)
        results[policy] = {
            "policy": policy,
            "b_idle": idle,
            "b_flood": [],
            "alone": [],
            "with_b": [],
        }
    # Rounds alternate A alone and A with B, so a slow spell of a shared machine falls on
    # both; B's samples under the flood are pooled (a p99 of two or three is only their max).
    for round_index in range(args.rounds):
        order = list(POLICY_MODELS) if round_index % 2 == 0 else list(POLICY_MODELS)[::-1]
        for policy in order:
            result, driver = results[policy], drivers[policy]
            result["alone"].append(await driver.flood("tA", args.flood, args.prompt, args.output))
            tenant_b.start(10**6, args.interval, POLICY_MODELS[policy])
            result["with_b"].append(await driver.flood("tA", args.flood, args.prompt, args.output))
            result["b_flood"] += await tenant_b.collect()
    tenant_b.close()
    for result in results.values():  # (seconds, tokens) over all rounds
        result["a_alone"] = tuple(map(sum, zip(*result.pop("alone"), strict=True)))
        result["a_with_b"] = tuple(map(sum, zip(*result.pop("with_b"), strict=True)))
    results["fair"]["weights"] = await weighted_share(
        drivers["fair"], args.weighted, args.weighted_output
    )
    await client.close()
    return results


def report(fair: dict, fifo: dict) -> list[str]:
    lines = []

    def ttft_line(r: dict, key: str, label: str) -> str:
        values = [t[0] for t in r[key]]
        queued = statistics.median(t[1] for t in r[key]) * 1000
        first_step = statistics.median(t[2] for t in r[key]) * 1000
        return (
            f"| {r['policy']} | B's TTFT {label} | p50 {statistics.median(values) * 1000:.0f} ms, "
            f"p99 {percentile(values, 0.99) * 1000:.0f} ms (n={len(values)}); in the engine, "
            f"p50s: queued {queued:.1f} ms, scheduled to first token {first_step:.1f} ms |"
        )

    lines += ["| policy | measure | value |", "|---|---|---|"]
    for r in (fair, fifo):
        lines.append(ttft_line(r, "b_idle", "idle"))
        lines.append(ttft_line(r, "b_flood", "under A's flood"))
        alone_s, alone_tokens = r["a_alone"]
        with_s, with_tokens = r["a_with_b"]
        lines.append(
            f"| {r['policy']} | A alone | {alone_tokens / alone_s:.0f} tok/s ({alone_s:.1f} s) |"
        )
        lines.append(
            f"| {r['policy']} | A with B | {with_tokens / with_s:.0f} tok/s ({with_s:.1f} s) |"
        )
    b_tokens = 20  # each of B's requests: 16 prompt + 4 output tokens
    lines.append("")

    def ttfts(r: dict, key: str) -> list[float]:
        return [t[0] for t in r[key]]

    def total(r: dict) -> float:
        return (r["a_with_b"][1] + b_tokens * len(r["b_flood"])) / r["a_with_b"][0]

    idle = statistics.median(ttfts(fair, "b_idle"))
    w1, w3 = fair["weights"]
    checks = [
        *flood_checks(idle, ttfts(fair, "b_flood"), fair, total(fair) / total(fifo)),
        (
            f"weights 1:3, output tokens while both backlogged {w1}:{w3} = 1:{w3 / max(w1, 1):.2f}",
            "1:3 within 10%",
            abs(w3 / max(w1, 1) - 3) <= 0.3,
        ),
        (
            f"FIFO: B's TTFT p50 under flood / idle p50 = "
            f"{statistics.median(ttfts(fifo, 'b_flood')) / statistics.median(ttfts(fifo, 'b_idle')):.1f}",
            "(today's behaviour)",
            True,
        ),
    ]
    lines += ["| ratio | goal | holds |", "|---|---|---|"]
    lines += [f"| {text} | {goal} | {'yes' if ok else 'NO'} |" for text, goal, ok in checks]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint dir (default: make the tiny llama)")
    add_flood_arguments(parser, idle_samples=10)
    parser.add_argument(
        "--weighted",
        type=int,
        default=96,
        help="requests per weighted tenant (enough that both stay backlogged for seconds)",
    )
    parser.add_argument("--weighted-output", type=int, default=64)
    parser.add_argument(
        "--fair-step-tokens", type=int, help="the engine's --fair-step-tokens (default: its own)"
    )
    parser.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another engine flag for both policies' engines, e.g. cpu_threads=1, or a bare "
        "flag such as no-step-preemption (repeatable)",
    )
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record
    from controlplane.launcher.stack import Stack
    from engine.model_config import ModelConfig

    workdir = Path(tempfile.mkdtemp(prefix="fair-bench-"))
    model_path = args.model
    if model_path is None:
        from engine.tooling.demo.checkpoint import make_checkpoint

        model_path = str(make_checkpoint(workdir / "llama-tiny", size="tiny"))
    vocab = ModelConfig.from_pretrained(model_path).vocab_size
    machine = machine_line()
    print(machine)
    cap = args.fair_step_tokens
    step_cap = {} if cap is None else {"fair_step_tokens": cap}
    for option in args.engine_option:
        name, has_value, value = option.partition("=")
        step_cap[name.replace("-", "_")] = value if has_value else True  # a bare flag
    prefix = "fairbench"
    stack = Stack(workdir / "stack", redis_prefix=prefix)
    url = stack.start_redis()
    try:
        for policy, model in POLICY_MODELS.items():
            stack.start_engine(
                model_path,
                model,
                name=f"engine-{policy}",
                device="cpu",
                dtype="float32",
                max_num_seqs=args.max_num_seqs,
                scheduling_policy=policy,
                **step_cap,
            )
        results = asyncio.run(scenario(url, prefix, model_path, vocab, args))
    finally:
        stack.stop()
    lines = report(results["fair"], results["fcfs"])
    for policy, r in results.items():  # what a p99 of a few dozen samples is made of
        slowest = sorted((t[0] * 1000 for t in r["b_flood"]), reverse=True)[:5]
        print(f"{policy}: B's slowest TTFTs under the flood, ms:", [round(t) for t in slowest])
    print("\n".join(lines))
    if args.record:
        record("Fair share across tenants (issue 26)", invocation(), machine, lines)


if __name__ == "__main__":
    main()
