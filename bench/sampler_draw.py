"""The sampler's random draw on a CPU: inverse transform sampling (engine/sample/sampler.py,
one uniform number a row) against the Gumbel-max draw it replaced (``argmax(probs / q)`` with
``q ~ Exponential(1)`` for every token of the vocabulary), side by side in one process.

1. The draw alone, per shape (rows x vocabulary): the median of ``--rounds`` timings of each,
   alternating.
2. With ``--end-to-end``: SmolLM2-135M-Instruct (bench/single_stream.py's checkpoint) through
   the offline ``LLM``, temperature 0.8, 128 tokens per sequence, at 1 and 16 sequences; the
   two draws swapped in turn, tokens/s per run and the median.

    .venv/bin/python bench/sampler_draw.py
    .venv/bin/python bench/sampler_draw.py --end-to-end --record
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from engine.sample import sampler  # noqa: E402

# (rows, vocabulary): the tiny test model's, SmolLM2's and Qwen3's vocabularies.
SHAPES = [(256, 1024), (1, 49152), (16, 49152), (64, 49152), (1, 151936), (64, 151936)]
NEW = sampler.inverse_transform


def gumbel_max(probs, generators, default=None):
    """The draw before: a vocabulary-sized row of exponentials per row."""
    q = torch.empty_like(probs)
    own = [i for i, g in enumerate(generators) if g is not None]
    if len(own) < len(generators):
        q.exponential_(generator=default)
    for i in own:
        q[i].exponential_(generator=generators[i])
    return probs.div_(q).argmax(dim=-1)


def time_draw(fn, probs: torch.Tensor, repeats: int) -> float:
    """Milliseconds per draw of ``fn`` from ``probs``. The old draw divides them in place, so
    each method draws from its own copy; the cost does not depend on the values."""
    start = time.perf_counter()
    for _ in range(repeats):
        fn(probs, [None] * probs.shape[0])
    return (time.perf_counter() - start) / repeats * 1000


def draw_alone(rounds: int) -> list[str]:
    lines = [
        "| rows x vocabulary | Gumbel-max (before) | inverse transform | ratio |",
        "|---|---|---|---|",
    ]
    for rows, vocab in SHAPES:
        probs = torch.softmax(torch.randn(rows, vocab) * 3, dim=-1)
        own = {"old": probs.clone(), "new": probs}
        repeats = max(1, 200_000 // (rows * vocab) * 10)
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(rounds):
            times["old"].append(time_draw(gumbel_max, own["old"], repeats))
            times["new"].append(time_draw(NEW, own["new"], repeats))
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        lines.append(f"| {rows} x {vocab} | {old:.3f} ms | {new:.3f} ms | {old / new:.1f}x |")
    return lines


def end_to_end(rounds: int) -> list[str]:
    from bench.single_stream import demo_checkpoint
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    llm = LLM(model=str(demo_checkpoint(REPO / "var")), dtype="float32", max_num_seqs=64)
    params = SamplingParams(max_tokens=128, temperature=0.8, ignore_eos=True)
    prompt = "Write a short story about a lighthouse keeper."
    lines = ["| sequences | Gumbel-max (before), tok/s | inverse transform, tok/s | ratio |"]
    lines.append("|---|---|---|---|")
    for batch in (1, 16):
        rates: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(rounds):
            for name, fn in (("old", gumbel_max), ("new", NEW)):
                sampler.inverse_transform = fn
                start = time.perf_counter()
                llm.generate([prompt] * batch, params)
                rates[name].append(batch * params.max_tokens / (time.perf_counter() - start))
        sampler.inverse_transform = NEW
        old, new = statistics.median(rates["old"]), statistics.median(rates["new"])
        each = {k: ", ".join(f"{x:.0f}" for x in v) for k, v in rates.items()}
        lines.append(
            f"| {batch} | {old:.0f} ({each['old']}) | {new:.0f} ({each['new']}) | {new / old:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--end-to-end", action="store_true", help="also SmolLM2 through LLM")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()
    from bench.peers import machine_line, record

    torch.manual_seed(0)
    machine = machine_line()
    print(machine)
    lines = draw_alone(args.rounds)
    if args.end_to_end:
        lines += ["", *end_to_end(args.rounds)]
    print("\n".join(lines))
    if args.record:
        command = "python bench/sampler_draw.py " + " ".join(sys.argv[1:])
        record("The sampler's draw on a CPU", command.strip(), machine, lines)


if __name__ == "__main__":
    main()
