"""What an idle spell costs the next piece of work on this host: a Redis round trip and an
engine step, each timed back to back and after the process slept ``--gaps`` ms.

A request's time to first token on a quiet platform is a chain of short hops (the API, Redis,
the engine's reader, loop and writer threads), each of which wakes up from idle. On some
virtual machines a core that went idle is slow to wake (the hypervisor may halt it and run
other guests there, whose work also evicts the caches), and every hop pays for it. This
bench measures that cost apart from the platform, so that a latency reading can be compared
across machine kinds:

- a Redis ``XADD`` round trip to a private Redis (the same command an API process sends);
- one engine step that computes a cache hit: 40 new tokens after 1,008 cached ones, the next
  turn of a conversation, on the tiny random-weight llama the routing bench uses.

Rounds interleave the gaps, so a machine whose speed drifts favours none of them.

    .venv/bin/python bench/idle_wakeup.py
    .venv/bin/python bench/idle_wakeup.py --rounds 30 --record
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import median  # noqa: E402

CACHED, NEW = 1008, 40  # a hit: 63 cached blocks of 16, then the turn's new tokens


def redis_round_trip(client) -> float:
    start = time.perf_counter()
    client.xadd("idle-wakeup", {"f": b"x" * 200}, maxlen=1000, approximate=True)
    return time.perf_counter() - start


class HitStep:
    """Each call adds the next turn of one conversation and times its step (its first token)."""

    def __init__(self, workdir: Path):
        import torch

        from engine.config import EngineConfig
        from engine.llm_engine import LLMEngine
        from engine.sampling_params import SamplingParams
        from engine.tooling.demo.checkpoint import make_checkpoint

        torch.set_num_threads(1)  # one step on one core, as each replica's in the routing bench
        model = make_checkpoint(workdir / "llama-tiny", size="tiny")
        self.engine = LLMEngine(
            EngineConfig(model=str(model), device="cpu", dtype="float32", max_num_seqs=16)
        )
        self.params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
        self.rng = random.Random(0)
        self.prefix = [self.rng.randrange(3, 1000) for _ in range(CACHED)]
        self.count = 0

    def __call__(self) -> float:
        self.count += 1
        prompt = self.prefix + [self.rng.randrange(3, 1000) for _ in range(NEW)]
        start = time.perf_counter()
        self.engine.add_request(f"turn-{self.count}", prompt, self.params)
        while self.engine.has_unfinished_requests():
            self.engine.step()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per gap and measure")
    parser.add_argument(
        "--gaps", default="0,1,10,100", help="idle spells before a sample, ms (0: back to back)"
    )
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    from bench.peers import invocation, machine_line, record
    from controlplane.launcher.redis_server import RedisServer
    from engine.redis_streams import connect

    gaps = [float(g) / 1000 for g in args.gaps.split(",")]
    machine = machine_line()
    print(machine)
    workdir = Path(tempfile.mkdtemp(prefix="idle-wakeup-"))
    server = RedisServer(workdir / "redis").start()
    try:
        client = connect(server.url)
        step = HitStep(workdir)
        for _ in range(5):  # warm-up: the prefix is cached from here on
            redis_round_trip(client)
            step()
        samples: dict[float, dict[str, list[float]]] = {g: {"redis": [], "step": []} for g in gaps}
        measures = (("redis", lambda: redis_round_trip(client)), ("step", step))
        for number in range(args.rounds):
            for gap in gaps if number % 2 == 0 else reversed(gaps):
                for name, measure in measures:
                    measure()  # both ends warm: a sample after no gap is back to back
                    if gap:
                        time.sleep(gap)
                    samples[gap][name].append(measure())
    finally:
        server.stop()
    lines = [
        "| idle before | Redis XADD round trip, p50 | ratio | hit step, p50 | ratio |",
        "|---|---|---|---|---|",
    ]
    base = {name: median(samples[gaps[0]][name]) for name in ("redis", "step")}
    for gap in gaps:
        redis_p50, step_p50 = median(samples[gap]["redis"]), median(samples[gap]["step"])
        lines.append(
            f"| {gap * 1000:g} ms | {redis_p50 * 1e3:.3f} ms | {redis_p50 / base['redis']:.2f}x "
            f"| {step_p50 * 1e3:.2f} ms | {step_p50 / base['step']:.2f}x |"
        )
    print("\n".join(lines))
    if args.record:
        title = "Idle wake-up: a round trip and a step after an idle spell"
        record(title, invocation(), machine, lines)


if __name__ == "__main__":
    main()
