"""The sampler on a CPU, before and after, side by side in one process: the random draw by
inverse transform sampling (engine/sample/sampler.py, one uniform number a row), its running
sum searched over block sums (``search_running_sum``) against one scan of the whole row
(``cumsum``, its search until 2026-11-30; the Gumbel-max draw before that, ``argmax(probs / q)``
with ``q ~ Exponential(1)`` for every token, cost 10-35x the scan: docs/benchmarks.md); and
top-p from each row's best tokens (``best_candidates``) against a sort of the whole row
(``sorted_whole``, every device's path before).

1. The draw alone, per shape (rows x vocabulary): the median of ``--rounds`` timings of each,
   alternating.
2. Top-p 0.95 alone, per shape, on logits whose probabilities fall off as rank^-1.5 (a
   nucleus of about 250 tokens).
3. With ``--end-to-end``: SmolLM2-135M-Instruct (bench/single_stream.py's checkpoint) through
   the offline ``LLM``, 128 tokens per sequence, at 1 and 16 sequences, at temperature 0.8 and
   at temperature 0.8 with top-p 0.95; before and after swapped in turn, tokens/s per run and
   the median.

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


def whole_row_scan(probs, generators, default=None):
    """The draw before: the same uniform numbers, searched in one running sum of each row."""
    u = torch.empty(probs.shape[0], 1, dtype=torch.float32)
    own = [i for i, g in enumerate(generators) if g is not None]
    if len(own) < len(generators):
        u.uniform_(generator=default)
    for i in own:
        u[i].uniform_(generator=generators[i])
    cdf = probs.cumsum(dim=-1, dtype=torch.float32)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
    return token.clamp_(max=probs.shape[1] - 1)


def ms_per_call(call, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats * 1000


def per_shape(
    columns: tuple[str, str], calls, rounds: int, shapes=SHAPES, min_repeats: int = 1
) -> list[str]:
    """A table row per shape: ``calls(rows, vocab)`` gives the (before, after) calls, timed in
    turn ``rounds`` times (each timing the mean of at least ``min_repeats`` calls); their
    medians and the ratio."""
    lines = [f"| rows x vocabulary | {columns[0]} (before) | {columns[1]} | ratio |"]
    lines.append("|---|---|---|---|")
    for rows, vocab in shapes:
        before, after = calls(rows, vocab)
        repeats = max(min_repeats, 200_000 // (rows * vocab) * 10)
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(rounds):
            for taken, call in zip(times, (before, after), strict=True):
                taken.append(ms_per_call(call, repeats))
        old, new = statistics.median(times[0]), statistics.median(times[1])
        lines.append(f"| {rows} x {vocab} | {old:.3f} ms | {new:.3f} ms | {old / new:.1f}x |")
    return lines


def draw_calls(rows: int, vocab: int):
    probs = torch.softmax(torch.randn(rows, vocab) * 3, dim=-1)
    return (lambda: whole_row_scan(probs, [None] * rows), lambda: NEW(probs, [None] * rows))


def top_p_calls(rows: int, vocab: int):
    # Probability proportional to rank^-1.5 over a shuffled vocabulary: a tail that decays as a
    # language model's does, with a 0.95 nucleus of about 250 tokens.
    generator = torch.Generator().manual_seed(0)
    ranks = torch.stack([torch.randperm(vocab, generator=generator) for _ in range(rows)])
    logits = -1.5 * torch.log1p(ranks.float())
    top_p = torch.full((rows,), 0.95)
    return (
        lambda: sampler.sorted_whole(logits, None, top_p),
        lambda: sampler.apply_top_k_top_p(logits, None, top_p),
    )


def end_to_end(rounds: int) -> list[str]:
    from bench.single_stream import demo_checkpoint
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    llm = LLM(model=str(demo_checkpoint(REPO / "var")), dtype="float32", max_num_seqs=64)
    prompt = "Write a short story about a lighthouse keeper."
    lines = ["| sampling | sequences | before, tok/s | after, tok/s | ratio |"]
    lines.append("|---|---|---|---|---|")
    methods = {
        "old": (whole_row_scan, sampler.apply_top_k_top_p),
        "new": (NEW, sampler.apply_top_k_top_p),
    }
    for label, top_p in (("temperature 0.8", 1.0), ("temperature 0.8, top-p 0.95", 0.95)):
        params = SamplingParams(max_tokens=128, temperature=0.8, top_p=top_p, ignore_eos=True)
        for batch in (1, 16):
            rates: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(rounds):
                for name, (draw, top_k_top_p) in methods.items():
                    sampler.inverse_transform, sampler.apply_top_k_top_p = draw, top_k_top_p
                    start = time.perf_counter()
                    llm.generate([prompt] * batch, params)
                    rates[name].append(batch * params.max_tokens / (time.perf_counter() - start))
            sampler.inverse_transform, sampler.apply_top_k_top_p = methods["new"]
            old, new = statistics.median(rates["old"]), statistics.median(rates["new"])
            each = {k: ", ".join(f"{x:.0f}" for x in v) for k, v in rates.items()}
            lines.append(
                f"| {label} | {batch} | {old:.0f} ({each['old']}) | {new:.0f} ({each['new']}) | "
                f"{new / old:.2f} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--end-to-end", action="store_true", help="also SmolLM2 through LLM")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()
    from bench.peers import invocation, machine_line, record

    torch.manual_seed(0)
    machine = machine_line()
    print(machine)
    lines = [
        *per_shape(("whole-row scan", "block search"), draw_calls, args.rounds),
        "",
        *per_shape(("whole sort", "best candidates"), top_p_calls, args.rounds),
    ]
    if args.end_to_end:
        lines += ["", *end_to_end(args.rounds)]
    print("\n".join(lines))
    if args.record:
        record("The sampler's draw on a CPU", invocation(), machine, lines)


if __name__ == "__main__":
    main()
