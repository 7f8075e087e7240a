"""Penalties on a CPU, before and after, side by side in one process: repetition, presence and
frequency penalties applied at the tokens each row has seen, with each output's counts kept on
its request from step to step (engine/sample/penalties.py), against one of two befores
(``--before``): ``recount``, the same but each row's whole output counted again every step
(the sampler until 2026-11-27), or ``dense``, every row's prompt and output counted over the
whole vocabulary each step (the sampler's way before that, and vLLM's).

1. The penalties alone, per shape (rows x vocabulary), every row with all three penalties, a
   ``--prompt``-token prompt and a ``--output``-token output that grows by a token before each
   call, as in a decode step: the median of ``--rounds`` timings of each (means of 20 calls or
   more), alternating. Both include a copy of the logits.
2. With ``--end-to-end``: SmolLM2-135M-Instruct (bench/single_stream.py's checkpoint) through
   the offline ``LLM``, 128 tokens per sequence at temperature 0.8, repetition penalty 1.1,
   frequency penalty 0.3 and presence penalty 0.2, at 1, 16 and 64 sequences; before and after
   swapped in turn, tokens/s per run and the median, and the median time of the penalties
   in a step.

    .venv/bin/python bench/penalties.py --output 2000
    .venv/bin/python bench/penalties.py --end-to-end --record
    .venv/bin/python bench/penalties.py --before dense
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.sampler_draw import per_shape  # noqa: E402
from engine.request import Request  # noqa: E402
from engine.sample import SamplingBatch, penalties, sampler  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402

# (rows, vocabulary): one SmolLM2 stream, SmolLM2 batches, a Qwen3 batch.
SHAPES = [(1, 49152), (16, 49152), (64, 49152), (16, 151936)]
PARAMS = dict(repetition_penalty=1.1, frequency_penalty=0.3, presence_penalty=0.2)


def dense_counts(rows: list[list[int]], num_rows: int, vocab: int) -> torch.Tensor:
    """The before: each row's token counts over the whole vocabulary, from its token list."""
    width = max((len(r) for r in rows), default=0)
    if width == 0:
        return torch.zeros(num_rows, vocab)
    padded = torch.full((num_rows, width), vocab, dtype=torch.long)  # column ``vocab``: padding
    for i, r in enumerate(rows):
        if r:
            padded[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    counts = torch.zeros(num_rows, vocab + 1)
    counts.scatter_add_(1, padded, torch.ones(num_rows, width))
    return counts[:, :vocab]


def dense_penalties(logits: torch.Tensor, batch: SamplingBatch) -> None:
    """The dense before, in place: every row's prompt and output counted over the vocabulary."""
    num_rows, vocab = logits.shape
    prompts, outputs = [[] for _ in range(num_rows)], [[] for _ in range(num_rows)]
    for row, request in batch.penalized_rows:
        prompts[row], outputs[row] = request.prompt_token_ids, request.output_token_ids
    counts = dense_counts(outputs, num_rows, vocab)
    seen = (dense_counts(prompts, num_rows, vocab) > 0) | (counts > 0)
    rep = batch.repetition_penalty[:, None].expand_as(logits)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits.copy_(torch.where(seen, penalized, logits))
    logits -= batch.frequency_penalty[:, None] * counts
    logits -= batch.presence_penalty[:, None] * (counts > 0).to(logits.dtype)


def recount_penalties(logits: torch.Tensor, batch: SamplingBatch) -> None:
    """The recount before (the sampler until 2026-11-27), in place: each row's whole output
    counted again every step, and the logits read and written by ``tensor[keys]``."""
    vocab, prompt_keys, output_keys = logits.shape[1], [], []
    for row, request in batch.penalized_rows:
        base = row * vocab
        if request.sampling_params.repetition_penalty != 1.0:
            prompt_keys.append(penalties.distinct_prompt_ids(request) + base)
        if output := request.output_token_ids:
            output_keys.append(np.asarray(output, dtype=np.int64) + base)
    output = counts = np.empty(0, dtype=np.int64)
    if output_keys:
        output, counts = np.unique(np.concatenate(output_keys), return_counts=True)
    seen = np.concatenate([*prompt_keys, output])
    flat = logits.view(-1)
    if seen.size:
        keys = torch.from_numpy(seen)
        values, factor = flat[keys], batch.repetition_penalty[keys // vocab]
        flat[keys] = torch.where(values > 0, values / factor, values * factor)
    if output.size:
        keys = torch.from_numpy(output)
        values, rows = flat[keys], keys // vocab
        values -= batch.frequency_penalty[rows] * torch.from_numpy(counts).to(logits.dtype)
        values -= batch.presence_penalty[rows]
        flat[keys] = values


BEFORE = {"recount": recount_penalties, "dense": dense_penalties}


def penalty_calls(args):
    old_way = BEFORE[args.before]

    def calls(rows: int, vocab: int):
        rng = random.Random(rows)
        requests = []
        for i in range(rows):
            prompt = [rng.randrange(vocab) for _ in range(args.prompt)]
            request = Request(f"r{i}", prompt, SamplingParams(**PARAMS), max_tokens=10**6)
            for _ in range(args.output):
                request.append_output_token(rng.randrange(vocab))
            requests.append(request)
        batch = SamplingBatch.from_requests(
            requests,
            generators={},
            eos_token_ids=frozenset(),
            vocab_size=vocab,
            device=torch.device("cpu"),
        )
        logits = torch.randn(rows, vocab)

        def step(method):
            for request in requests:  # a decode step's token
                request.append_output_token(rng.randrange(vocab))
            method(logits.clone(), batch)

        # A running request's prompt tokens are found, and its output first counted, at its
        # first step only.
        penalties.apply_penalties(logits.clone(), batch)
        return (lambda: step(old_way)), (lambda: step(penalties.apply_penalties))

    return calls


def end_to_end(rounds: int, old_way) -> list[str]:
    from bench.single_stream import demo_checkpoint
    from engine.llm import LLM

    llm = LLM(model=str(demo_checkpoint(REPO / "var")), dtype="float32", max_num_seqs=64)
    prompt = "Write a short story about a lighthouse keeper."
    params = SamplingParams(max_tokens=128, temperature=0.8, ignore_eos=True, **PARAMS)
    lines = [
        "| sequences | before, tok/s | after, tok/s | ratio | penalties per step, before / after |",
        "|---|---|---|---|---|",
    ]
    methods = {"before": old_way, "after": penalties.apply_penalties}
    for batch in (1, 16, 64):
        rates: dict[str, list[float]] = {name: [] for name in methods}
        spent: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(rounds):
            for name, method in methods.items():
                sampler.apply_penalties = timed(method, spent[name])
                start = time.perf_counter()
                llm.generate([prompt] * batch, params)
                rates[name].append(batch * params.max_tokens / (time.perf_counter() - start))
        sampler.apply_penalties = methods["after"]
        old, new = statistics.median(rates["before"]), statistics.median(rates["after"])
        each = {k: ", ".join(f"{x:.0f}" for x in v) for k, v in rates.items()}
        step = {k: statistics.median(v) * 1000 for k, v in spent.items()}
        lines.append(
            f"| {batch} | {old:.0f} ({each['before']}) | {new:.0f} ({each['after']}) | "
            f"{new / old:.2f} | {step['before']:.2f} / {step['after']:.2f} ms |"
        )
    return lines


def timed(method, spent: list[float]):
    """``method`` that adds the seconds of each call to ``spent``."""

    def call(logits, batch):
        start = time.perf_counter()
        method(logits, batch)
        spent.append(time.perf_counter() - start)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=1000, help="prompt tokens per row")
    parser.add_argument("--output", type=int, default=200, help="output tokens per row")
    parser.add_argument("--before", choices=sorted(BEFORE), default="recount")
    parser.add_argument("--end-to-end", action="store_true", help="also SmolLM2 through LLM")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()
    from bench.peers import invocation, machine_line, record

    torch.manual_seed(0)
    machine = machine_line()
    print(machine)
    columns = (f"{args.before}", "counts kept")
    lines = per_shape(columns, penalty_calls(args), args.rounds, SHAPES, min_repeats=20)
    if args.end_to_end:
        lines += ["", *end_to_end(args.rounds, BEFORE[args.before])]
    print("\n".join(lines))
    if args.record:
        record("Penalties on a CPU", invocation(), machine, lines)


if __name__ == "__main__":
    main()
