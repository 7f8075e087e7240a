"""Issue 26's flood as an operator meets it: two tenants of one served platform, through the API.

bench/tenant_fairness.py drives the engine's Redis interface directly, which isolates the
engine's scheduling. This one runs the issue's scenario the way its report was taken: the whole
platform as ``bin/serve`` starts it (private Redis, SQLite, one engine with ``--max-num-seqs 8``
on a tiny random-weight llama, Daphne), two tenants with keys of their own, and the official
``openai`` SDK as client:

- tenant B (its own process, as another user would be) streams one short completion (16 prompt
  tokens, 4 output tokens) every ``--interval`` s and takes its time to first token;
- tenant A sends ``--flood`` completions of ``--prompt`` token ids at once (``--a-text``: as
  text of about as many tokens, which the API's planning threads tokenize, as a chat flood's
  would be).

The platform serves the checkpoint under two names, each by an engine of its own: MODEL by a
``fair`` engine, FIFO_MODEL by an ``fcfs`` one (``--fair-only``: MODEL alone). B's idle TTFTs
are taken on each; then ``--rounds`` rounds, each running per policy A alone and A with B (B's
TTFTs pooled over the rounds), the policies' order alternating from round to round, so that
whatever else the shared machine does at the time falls on both alike (one platform per policy,
run one after the other, read fair / FIFO throughput 0.94 and 1.03 on the same machine within
an hour; 2026-11-28). The idle engine waits on Redis and takes next to no CPU. Prints the issue's ratios, B's slowest requests under the flood (with when
each was sent into it), the CPU A's client took per flood (it shares the platform's cores
here, as no real client would, and ``--a-client raw``, httpx sending bodies encoded before the
flood instead of the openai SDK, takes less), and the CPU each process took per flood, A alone
and A with B (bench/process_cpu.py): where the cores went when A's throughput with B falls. ``--record`` appends them to docs/benchmarks.md.

    .venv/bin/python bench/tenant_flood_api.py
    .venv/bin/python bench/tenant_flood_api.py --rounds 5 --record
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import percentile  # noqa: E402
from bench.process_cpu import ProcessCpu  # noqa: E402
from bench.tenant_b import TenantB, add_flood_arguments, flood_checks  # noqa: E402

MODEL = "flood-bench"  # served by the fair engine
FIFO_MODEL = "flood-bench-fcfs"  # the same checkpoint, served by the fcfs engine
POLICY_MODELS = {"fair": MODEL, "fcfs": FIFO_MODEL}
B_PROMPT, B_OUTPUT = 16, 4

# Run with ``python -c`` in the platform's environment: a second tenant and its key.
FLOOD_TENANT_KEY = """
import django
django.setup()
from controlplane.tenants.services import api_key_create, tenant_create
print(api_key_create(tenant=tenant_create(name="flood")).secret)
"""


def random_prompt(rng: random.Random, length: int, vocab: int) -> list[int]:
    # Random ids: no prefix-cache hit between requests, every prompt token is computed.
    return [rng.randrange(3, vocab) for _ in range(length)]


def _tenant_b_main(base_url: str, key: str, vocab: int, conn, stop) -> None:
    """Tenant B's process: per command (count, interval, model), streams that many requests to
    the model, one per interval or until ``stop``, and sends back (when sent, TTFT) for each (``time.monotonic``,
    the same clock in every process)."""
    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)
    rng = random.Random(1)
    while (command := conn.recv()) is not None:
        count, interval, model = command
        ttfts = []
        for _ in range(count):
            if stop.is_set():
                break
            began = time.monotonic()
            stream = client.completions.create(
                model=model,
                prompt=random_prompt(rng, B_PROMPT, vocab),
                max_tokens=B_OUTPUT,
                temperature=0.0,
                stream=True,
                # With logprobs every token makes a chunk. Without, a token whose text is part
                # of a character (14% of the tiny random model's vocabulary) sends nothing until
                # the next token completes it, and under A's flood that next token comes a whole
                # engine step later: for those requests the bench timed the second token.
                logprobs=1,
                extra_body={"ignore_eos": True},
            )
            first = None
            for chunk in stream:
                if first is None and chunk.choices:
                    first = time.monotonic() - began
            ttfts.append((began, first))
            time.sleep(max(0.0, interval - (time.monotonic() - began)))
        conn.send(ttfts)


async def flood(
    clients: list, rng: random.Random, args, vocab: int, model: str, on_start=lambda: None
) -> tuple[float, int]:
    """A's requests to ``model`` at once, spread over ``clients``: (seconds, prompt + output
    tokens).
    ``on_start()`` is called as the first is sent, once the prompts are made."""
    prompts = [random_prompt(rng, args.prompt, vocab) for _ in range(args.flood)]
    if args.a_text:  # words for the API to tokenize (about 4 tokens each: "w123")
        prompts = [
            " ".join(f"w{token}" for token in prompt[: len(prompt) // 4]) for prompt in prompts
        ]
    if args.a_client == "raw":  # bodies encoded before the flood, sent by httpx alone
        bodies = [
            json.dumps(
                {"model": model, "prompt": p, "max_tokens": args.output, "temperature": 0.0,
                 "ignore_eos": True}
            ).encode()
            for p in prompts
        ]  # fmt: skip
        calls = [
            clients[i % len(clients)].post("/v1/completions", content=body)
            for i, body in enumerate(bodies)
        ]
    else:
        calls = [
            clients[i % len(clients)].completions.create(
                model=model,
                # The ids go in extra_body, which replaces this placeholder in the JSON body:
                # the SDK's request transform walks every id of a token-id prompt in Python,
                # about 35 ms of CPU for 1,000 ids, and A's client then used a core of the two
                # by itself, so the bench measured its own client (2026-11-26).
                prompt="",
                max_tokens=args.output,
                temperature=0.0,
                extra_body={"prompt": prompt, "ignore_eos": True},
            )
            for i, prompt in enumerate(prompts)
        ]  # coroutines: nothing is sent before the gather
    start = time.monotonic()
    on_start()
    responses = await asyncio.gather(*calls)
    elapsed = time.monotonic() - start
    return elapsed, sum(map(_tokens, responses))


def _tokens(response) -> int:
    """Prompt + output tokens of one of A's responses (the SDK's, or httpx's)."""
    if hasattr(response, "usage"):
        return response.usage.prompt_tokens + response.usage.completion_tokens
    usage = response.raise_for_status().json()["usage"]
    return usage["prompt_tokens"] + usage["completion_tokens"]


# A's requests go over this many SDK clients. httpx's connection pool scans all its connections
# for every waiting request at every change, so one pool of 136 connections cost A's client
# 3-4 s of CPU a flood (4.6 million ``is_idle`` calls) once B's requests slowed the flood a
# little, against under 1 s alone: the bench's own client, not the platform, made "A with B"
# look slower (2026-11-26).
A_CLIENTS = 16


async def scenario(
    base_url: str,
    b_key: str,
    a_key: str,
    vocab: int,
    args,
    policies: tuple[str, ...],
    platform_pids: dict[str, int],
) -> dict[str, dict]:
    """Per policy: B's TTFTs idle and under A's floods (with when each was sent into its
    flood), A's (seconds, tokens) alone and with B, A's client CPU per flood, and the CPU of
    each process (``platform_pids``, both clients) per flood alone and with B."""
    import httpx
    import openai

    per_client = -(-args.flood // A_CLIENTS)
    pools = [
        httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {a_key}", "Content-Type": "application/json"},
            timeout=600.0,
            limits=httpx.Limits(max_connections=per_client),
        )
        for _ in range(A_CLIENTS)
    ]
    clients = pools
    if args.a_client == "sdk":
        clients = [
            openai.AsyncOpenAI(
                base_url=f"{base_url}/v1", api_key=a_key, max_retries=0, http_client=pool
            )
            for pool in pools
        ]
    rng = random.Random(0)
    tenant_b = TenantB(_tenant_b_main, base_url, b_key, vocab)
    processes = ProcessCpu(
        {**platform_pids, "A's client": os.getpid(), "B's client": tenant_b.process.pid}
    )
    results: dict[str, dict] = {}
    for policy in policies:
        await tenant_b.trickle(3, 0.1, POLICY_MODELS[policy])  # warm-up
        idle = await tenant_b.trickle(args.idle_samples, 0.25, POLICY_MODELS[policy])
        results[policy] = {
            "policy": policy,
            "b_idle": [ttft for _, ttft in idle],
            "b_flood": [],
            "b_flood_sent": [],
            "a_client_cpu": [],  # CPU seconds of this process (A's client) per flood
            "alone": [],
            "with_b": [],
            "cpu_alone": [],  # per flood: {process: CPU seconds}
            "cpu_with_b": [],
        }
    began: list[float] = []  # a flood's start (time.monotonic()), and this process's CPU then

    def start_b(model: str) -> None:
        began[:] = time.monotonic(), time.process_time()
        tenant_b.start(10**6, args.interval, model)

    for round_index in range(args.rounds):
        for policy in policies if round_index % 2 == 0 else policies[::-1]:
            result, model = results[policy], POLICY_MODELS[policy]
            mark = processes.mark()
            result["alone"].append(await flood(clients, rng, args, vocab, model))
            result["cpu_alone"].append(processes.since(mark))
            mark = processes.mark()
            with_b = await flood(clients, rng, args, vocab, model, lambda m=model: start_b(m))
            result["cpu_with_b"].append(processes.since(mark))
            result["with_b"].append(with_b)
            result["a_client_cpu"].append(time.process_time() - began[1])
            for sent, ttft in await tenant_b.collect():
                result["b_flood"].append(ttft)
                result["b_flood_sent"].append(sent - began[0])
    tenant_b.close()
    for pool in pools:
        await pool.aclose()
    for result in results.values():
        result["a_alone"] = tuple(map(sum, zip(*result.pop("alone"), strict=True)))
        result["a_with_b"] = tuple(map(sum, zip(*result.pop("with_b"), strict=True)))
    return results


def report(fair: dict, fifo: dict | None) -> list[str]:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.0f} ms"

    lines = ["| policy | measure | value |", "|---|---|---|"]
    for r in (fair, fifo) if fifo else (fair,):
        for key, label in (("b_idle", "idle"), ("b_flood", "under A's flood")):
            values = r[key]
            lines.append(
                f"| {r['policy']} | B's TTFT {label} | p50 {ms(statistics.median(values))}, "
                f"p99 {ms(percentile(values, 0.99))} (n={len(values)}) |"
            )
        for key, label in (("a_alone", "A alone"), ("a_with_b", "A with B")):
            seconds, tokens = r[key]
            lines.append(
                f"| {r['policy']} | {label} | {tokens / seconds:.0f} tok/s ({seconds:.1f} s) |"
            )

    def total(r: dict) -> float:
        seconds, tokens = r["a_with_b"]
        return (tokens + (B_PROMPT + B_OUTPUT) * len(r["b_flood"])) / seconds

    idle = statistics.median(fair["b_idle"])
    checks = flood_checks(idle, fair["b_flood"], fair, total(fair) / total(fifo) if fifo else None)
    if fifo:
        fifo_ratio = statistics.median(fifo["b_flood"]) / statistics.median(fifo["b_idle"])
        checks.append(
            (f"FIFO: B's TTFT p50 under flood / idle p50 = {fifo_ratio:.1f}", "(before)", True)
        )
    lines += ["", "| ratio | goal | holds |", "|---|---|---|"]
    lines += [f"| {text} | {goal} | {'yes' if ok else 'NO'} |" for text, goal, ok in checks]
    slowest = sorted(zip(fair["b_flood"], fair["b_flood_sent"], strict=True))[-5:]
    slowest_text = ", ".join(f"{ms(ttft)} (sent at {sent:.2f} s)" for ttft, sent in slowest)
    lines += [
        "",
        f"fair: B's five slowest TTFTs under the flood, sent when into it: {slowest_text}",
        f"fair: A's client (the bench's process, on the same cores) used "
        f"{ms(statistics.median(fair['a_client_cpu']))} of CPU per flood (median)",
    ]
    return lines


def cpu_report(results: dict[str, dict]) -> list[str]:
    """CPU per flood (median) by process, A alone and A with B, per policy: where the cores
    went when A's throughput with B falls."""
    lines = [
        "CPU seconds per flood by process (median over the rounds; a flood's wall time in the "
        "last row):",
        "",
        "| process | " + " | ".join(f"{p}: A alone | {p}: A with B" for p in results) + " |",
        "|---|" + "---|---|" * len(results),
    ]
    names = sorted({name for r in results.values() for cpu in r["cpu_alone"] for name in cpu})
    for name in names:
        cells = []
        for r in results.values():
            for key in ("cpu_alone", "cpu_with_b"):
                values = [cpu[name] for cpu in r[key] if name in cpu]
                cells.append(f"{statistics.median(values):.2f}" if values else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = []
    for r in results.values():
        for key in ("cpu_alone", "cpu_with_b"):
            totals.append(f"{statistics.median(sum(cpu.values()) for cpu in r[key]):.2f}")
    lines.append("| all of them | " + " | ".join(totals) + " |")
    rounds = len(next(iter(results.values()))["cpu_alone"])
    walls = []
    for r in results.values():
        for key in ("a_alone", "a_with_b"):
            walls.append(f"{r[key][0] / rounds:.2f}")
    lines.append("| wall seconds (mean) | " + " | ".join(walls) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_flood_arguments(parser, idle_samples=20)
    parser.add_argument(
        "--engine-threads", type=int, help="the engine's --cpu-threads (default: one per core)"
    )
    parser.add_argument(
        "--fixed-engine-threads",
        action="store_true",
        help="the engine's --fixed-cpu-threads: every step on all its threads, even while the "
        "API and the clients use the cores (default: fewer then)",
    )
    parser.add_argument(
        "--engine-nice",
        type=int,
        help="the engine's --nice (default: 5 on a CPU, below the API and Redis; 0: theirs)",
    )
    parser.add_argument(
        "--gomp-spincount",
        type=int,
        help="GOMP_SPINCOUNT in the platform's environment: how long torch's idle threads in "
        "the engine spin before they sleep (libgomp's default: 300,000; docs/operations.md)",
    )
    parser.add_argument(
        "--a-client",
        choices=("sdk", "raw"),
        default="sdk",
        help="A's client: the openai SDK, or httpx sending bodies encoded before the flood "
        "(a load generator that takes less of the cores the platform runs on)",
    )
    parser.add_argument(
        "--a-text",
        action="store_true",
        help="A's prompts as text of about --prompt tokens, tokenized by the API's planning "
        "threads (default: token ids)",
    )
    parser.add_argument(
        "--tenant-queued-per-engine",
        type=int,
        help="the API's TENANT_QUEUED_PER_ENGINE (default 64; 0: no bound, A's whole flood "
        "goes into the stream at once, as before 2026-11-28)",
    )
    parser.add_argument(
        "--fair-only",
        action="store_true",
        help="run the fair policy alone (half the time; no fair/FIFO ratio)",
    )
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record
    from bench.served_platform import served_platform
    from engine.model_config import ModelConfig
    from engine.tooling.demo.checkpoint import make_checkpoint

    workdir = Path(tempfile.mkdtemp(prefix="flood-api-bench-"))
    checkpoint = make_checkpoint(workdir / "llama-tiny", size="tiny")
    vocab = ModelConfig.from_pretrained(str(checkpoint)).vocab_size
    machine = machine_line()
    print(machine, flush=True)
    policies = ("fair",) if args.fair_only else ("fair", "fcfs")
    options = {"max_num_seqs": args.max_num_seqs, "nice": args.engine_nice}
    if args.engine_threads:
        options["cpu_threads"] = args.engine_threads
    options["fixed_cpu_threads"] = args.fixed_engine_threads
    env = {"GOMP_SPINCOUNT": str(args.gomp_spincount)} if args.gomp_spincount else {}
    if args.tenant_queued_per_engine is not None:
        env["TENANT_QUEUED_PER_ENGINE"] = str(args.tenant_queued_per_engine)
    fifo = {FIFO_MODEL: {**options, "scheduling_policy": "fcfs"}}
    with served_platform(
        workdir,
        checkpoint,
        model_name=MODEL,
        engine_options={**options, "scheduling_policy": "fair"},
        extra_models=None if args.fair_only else fifo,
        env=env or None,
    ) as platform:
        a_key = subprocess.run(
            [sys.executable, "-c", FLOOD_TENANT_KEY],
            cwd=REPO,
            env=platform.stack.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        pids = {
            "engine (fair)": platform.engine.pid,
            "Daphne": platform.daphne.pid,
            "Redis": platform.stack.redis.process.pid,
        }
        if not args.fair_only:
            fifo_engine = f"engine-{FIFO_MODEL}"
            children = platform.stack.supervisor.children
            pids["engine (fcfs)"] = next(c.pid for c in children if c.name == fifo_engine)
        results = asyncio.run(
            scenario(platform.base_url, platform.key, a_key, vocab, args, policies, pids)
        )
    lines = report(results["fair"], results.get("fcfs"))
    lines += ["", *cpu_report(results)]
    print("\n".join(lines))
    if args.record:
        record(
            "Fair share across tenants, through the API (issue 26)", invocation(), machine, lines
        )


if __name__ == "__main__":
    main()
