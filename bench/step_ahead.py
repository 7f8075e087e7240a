"""A short prompt arriving between two steps of a busy engine: run it as a step of its own ahead
of the batch's next step, or in that step (engine/core/step_preemption.py).

In-process, one LLMEngine of a tiny random-weight llama on the CPU, one thread (no Redis, no
other processes: what is measured is the engine's steps alone). ``--running`` conversations
decode (each ``--context`` tokens long, speculative decoding as configured by default); each
turn a newcomer arrives between two steps: a ``--extend``-token prompt after ``--context``
tokens it has cached (a conversation's next turn), of a tenant with nothing else running. In
alternating rounds, the loop either runs ``step_inside(between_steps=True)`` before the next
step (what the service loop does) or goes straight to the next step. Prints, per mode, the
newcomer's time from arrival to its first token and the running requests' time from the
step before it arrived to their next token (the step ahead delays it), medians over
``--turns`` newcomers per round; ``--record`` appends them to docs/benchmarks.md.

    .venv/bin/python bench/step_ahead.py
    .venv/bin/python bench/step_ahead.py --rounds 6 --record
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_engine(args):
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.tooling.demo.checkpoint import make_checkpoint

    path = make_checkpoint(Path(tempfile.mkdtemp(prefix="step-ahead-")) / "llama", size="tiny")
    config = EngineConfig(
        model=str(path),
        device="cpu",
        dtype="float32",
        max_num_seqs=args.running + 4,
        cpu_threads=1,
        scheduling_policy="fair",
    )
    engine = LLMEngine(config)
    assert engine.enable_step_preemption(lambda: None), "step preemption needs fair + CPU"
    return engine


def one_round(engine, args, rng: random.Random, *, ahead: bool, tag: str) -> tuple[list, list]:
    """Newcomers' times to first token and the running requests' gaps, in seconds."""
    from engine.sampling_params import SamplingParams

    def prompt(length: int) -> list[int]:
        return [rng.randrange(3, 1000) for _ in range(length)]

    long = SamplingParams(temperature=0.0, max_tokens=args.context // 2, ignore_eos=True)
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    for i in range(args.running):
        engine.add_request(f"{tag}-run{i}", prompt(args.context), long, tenant=f"r{i}")
    for _ in range(3):  # their prefills done: from here on they decode
        engine.step()
    ttfts, gaps = [], []
    for turn in range(args.turns):
        history = prompt(args.context)
        warm = f"{tag}-warm{turn}"
        engine.add_request(warm, history, one, tenant="new")
        while not any(d.request_id == warm and d.finished for d in engine.step()):
            pass  # then its blocks are cached, as a conversation's earlier turn left them
        engine.step()  # a step of the running batch, then the newcomer arrives
        last = time.perf_counter()
        rid = f"{tag}-new{turn}"
        arrived = time.perf_counter()
        engine.add_request(rid, history + prompt(args.extend), one, tenant="new")
        first = None
        for _ in range(3):
            if ahead and first is None and engine.step_inside([rid], between_steps=True):
                first = time.perf_counter() - arrived  # published now, by the service loop
            deltas = engine.step()
            if len(gaps) == len(ttfts):  # the batch's first step after it arrived
                gaps.append(time.perf_counter() - last)
            if first is None and any(d.request_id == rid for d in deltas):
                first = time.perf_counter() - arrived
        ttfts.append(first)
    engine.abort_request([f"{tag}-run{i}" for i in range(args.running)])
    engine.step()
    return ttfts, gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=8, help="requests decoding meanwhile")
    parser.add_argument("--context", type=int, default=1000, help="tokens of each history")
    parser.add_argument("--extend", type=int, default=40, help="the newcomer's new tokens")
    parser.add_argument("--turns", type=int, default=20, help="newcomers per round")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (even)")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record

    machine = machine_line()
    print(machine)
    engine, rng = make_engine(args), random.Random(0)
    results: dict[bool, dict[str, list[float]]] = {m: {"ttft": [], "gap": []} for m in (1, 0)}
    for number in range(args.rounds):
        for ahead in (True, False) if number % 2 == 0 else (False, True):
            ttfts, gaps = one_round(engine, args, rng, ahead=ahead, tag=f"{number}{ahead:d}")
            results[ahead]["ttft"].append(statistics.median(ttfts))
            results[ahead]["gap"].append(statistics.median(gaps))
            ttft, gap = statistics.median(ttfts) * 1000, statistics.median(gaps) * 1000
            mode = "ahead" if ahead else "in the batch"
            print(f"round {number + 1}, {mode}: first token {ttft:.2f} ms, next {gap:.2f} ms")
    lines = [
        f"{args.running} requests decoding ({args.context}-token histories), a newcomer's "
        f"{args.extend} new tokens after {args.context} cached; medians over the rounds of each "
        "round's median:",
        "",
        "| newcomer's first step | its time to first token | the running requests' next token |",
        "|---|---|---|",
    ]
    for ahead, label in ((False, "in the batch's next step"), (True, "a step of its own, ahead")):
        ttft = statistics.median(results[ahead]["ttft"]) * 1000
        gap = statistics.median(results[ahead]["gap"]) * 1000
        lines.append(f"| {label} | {ttft:.2f} ms | {gap:.2f} ms |")
    ratio = statistics.median(results[False]["ttft"]) / statistics.median(results[True]["ttft"])
    lines += ["", f"Time to first token, in the batch / ahead: **{ratio:.2f}**"]
    print("\n".join(lines))
    if args.record:
        record(
            "A short prompt between two steps (bench/step_ahead.py)",
            invocation(),
            machine,
            lines,
        )


if __name__ == "__main__":
    main()
