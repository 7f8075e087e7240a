"""One tenant's burst over several engine replicas of a model: how evenly it splits, how long it
takes, fair engines against FIFO ones.

Each fair engine reads the shared stream up to its look-ahead (272 requests by default), so the
first reader back can take a whole burst; FIFO engines read 16 ahead and split it by taking
turns. Waiting requests handed over to an idle peer (engine/service/hand_over.py) are what
should keep the fair engines' split as even as FIFO's.

Real processes: a private Redis, ``--replicas`` fair engines serving MODEL and as many fcfs
ones serving FIFO_MODEL (the same tiny random-weight llama, ``--max-num-seqs 8``, one torch
thread each), driven through the API's ``EngineClient`` (its per-tenant bound included). Each
round sends ``--burst`` requests of ``--prompt`` random tokens at once to each model in turn
(the order alternating per round); the engines' status records say how many prompts each
computed. Prints, per policy, every round's split and time, and the medians.

    .venv/bin/python bench/replica_burst.py
    .venv/bin/python bench/replica_burst.py --replicas 2 --rounds 6 --record
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

MODEL, FIFO_MODEL = "burst-fair", "burst-fcfs"
POLICY_MODELS = {"fair": MODEL, "fcfs": FIFO_MODEL}


async def prompts_by_engine(client, prefix: str, model: str) -> dict[str, int]:
    """Each live engine of ``model``: the prompt tokens it has computed."""
    from engine.protocol import decode_status

    out = {}
    async for key in client.scan_iter(f"{prefix}:status:{model}:*"):
        raw = await client.get(key)
        if raw is not None:
            status = decode_status(raw)
            out[status.engine_id] = status.prompt_tokens_total
    return out


async def run(url: str, prefix: str, checkpoint: Path, vocab: int, args) -> dict[str, list]:
    import redis.asyncio as aioredis

    from engine.text.tokenizer import ChatTokenizer
    from inference.transport.engine_client import EngineClient, EngineRequest, SamplingOptions

    client = EngineClient(url, prefix=prefix, silence_timeout=600.0, max_waiting=10**6)
    tokenizer, status_client = ChatTokenizer(str(checkpoint)), aioredis.Redis.from_url(url)
    for model in POLICY_MODELS.values():  # every replica live before the first burst
        while len(await prompts_by_engine(status_client, prefix, model)) < args.replicas:
            await asyncio.sleep(0.2)
    rng = random.Random(0)
    sampling = SamplingOptions(temperature=0.0, max_tokens=args.output, ignore_eos=True)

    async def one(model: str, prompt: list[int]) -> None:
        request = EngineRequest.build(
            model=model,
            prompt_token_ids=prompt,
            sampling=sampling,
            tenant="tA",
            request_id=uuid.uuid4().hex,
        )
        async for _ in client.generate(request, tokenizer):
            pass

    rounds: dict[str, list] = {policy: [] for policy in POLICY_MODELS}
    for round_index in range(args.rounds):
        order = list(POLICY_MODELS) if round_index % 2 == 0 else list(POLICY_MODELS)[::-1]
        for policy in order:
            model = POLICY_MODELS[policy]
            prompts = [
                [rng.randrange(3, vocab) for _ in range(args.prompt)] for _ in range(args.burst)
            ]
            before = await prompts_by_engine(status_client, prefix, model)
            start = time.monotonic()
            await asyncio.gather(*[one(model, p) for p in prompts])
            seconds = time.monotonic() - start
            await asyncio.sleep(args.status_wait)  # the status records catch up
            after = await prompts_by_engine(status_client, prefix, model)
            split = sorted(
                ((after[e] - before.get(e, 0)) // args.prompt for e in after), reverse=True
            )
            rounds[policy].append((seconds, split))
            print(f"round {round_index + 1} {policy}: {seconds:.2f} s, split {split}", flush=True)
    await client.close()
    await status_client.aclose()
    return rounds


def report(rounds: dict[str, list], args) -> list[str]:
    lines = [
        "| policy | burst time per round | split per round (requests per engine) | median time | "
        "median max/min |",
        "|---|---|---|---|---|",
    ]

    def spread(split: list[int]) -> float:
        return split[0] / max(split[-1], 1)

    for policy, runs in rounds.items():
        times = ", ".join(f"{s:.2f}" for s, _ in runs)
        splits = ", ".join(":".join(map(str, split)) for _, split in runs)
        median_time = statistics.median(s for s, _ in runs)
        median_spread = statistics.median(spread(split) for _, split in runs)
        lines.append(
            f"| {policy} | {times} s | {splits} | {median_time:.2f} s | {median_spread:.2f} |"
        )
    fair = statistics.median(s for s, _ in rounds["fair"])
    fifo = statistics.median(s for s, _ in rounds["fcfs"])
    lines += [
        "",
        f"{args.replicas} replicas each, {args.burst} requests of {args.prompt} prompt and "
        f"{args.output} output tokens per burst; burst time fair / FIFO (medians) = "
        f"{fair / fifo:.2f}",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2, help="engines per policy")
    parser.add_argument("--burst", type=int, default=128, help="requests sent at once")
    parser.add_argument("--prompt", type=int, default=1000, help="prompt tokens per request")
    parser.add_argument("--output", type=int, default=16, help="output tokens per request")
    parser.add_argument("--rounds", type=int, default=6, help="bursts per policy")
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument(
        "--status-wait",
        type=float,
        default=1.2,
        help="seconds after a burst before reading the engines' counts (a status interval)",
    )
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record
    from controlplane.launcher.stack import Stack
    from engine.model_config import ModelConfig
    from engine.tooling.demo.checkpoint import make_checkpoint

    workdir = Path(tempfile.mkdtemp(prefix="replica-burst-"))
    checkpoint = make_checkpoint(workdir / "llama-tiny", size="tiny")
    vocab = ModelConfig.from_pretrained(str(checkpoint)).vocab_size
    machine = machine_line()
    print(machine, flush=True)
    prefix = f"burst{uuid.uuid4().hex[:4]}"
    stack = Stack(workdir / "stack", redis_prefix=prefix)
    url = stack.start_redis()
    try:
        for policy, model in POLICY_MODELS.items():
            for i in range(args.replicas):
                stack.start_engine(
                    checkpoint,
                    model,
                    name=f"{policy}-{i}",
                    device="cpu",
                    dtype="float32",
                    max_num_seqs=args.max_num_seqs,
                    scheduling_policy=policy,
                    cpu_threads=1,
                )
        rounds = asyncio.run(run(url, prefix, checkpoint, vocab, args))
    finally:
        stack.stop()
    lines = report(rounds, args)
    print("\n".join(lines))
    if args.record:
        record("One tenant's burst over engine replicas", invocation(), machine, lines)


if __name__ == "__main__":
    main()
