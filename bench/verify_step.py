"""The native CPU decode attention of a speculative verification step, by rows and context.

A request verifying k draft tokens runs k + 1 decode rows of one sequence
(engine/worker/step_inputs.py): row j is a query at position p + j over p + j + 1 tokens, every
row with the same block table. This times ``paged_decode_attention`` (kernels/cpu/attention.cpp)
on such rows, in SmolLM2-135M's shapes (9 query heads, 3 KV heads, head_dim 64, 16-token
blocks), for each number of rows and context p: the best of ``--repeats`` samples, each the
mean of ``--calls`` calls cycling through ``--caches`` KV caches (by default one per layer of
SmolLM2, so that K/V come from memory as they do in a decode step, not from the CPU caches). The table gives the time of one call (one layer), a step's worth of
them (``--layers`` layers) and how many one-row calls at that context the call costs.

    .venv/bin/python bench/verify_step.py                          # 1, 2, 4, 8 rows; 10, 400, 800
    .venv/bin/python bench/verify_step.py --rows 1,8 --contexts 800 --dtype bfloat16 --threads 1

``--layout separate`` gives every row a block table of its own (the same tokens copied to other
blocks): decode rows of different sequences, which share no K/V reads.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 16  # SmolLM2-135M; the engine's block size


def verification_rows(context: int, rows: int, dtype: torch.dtype, layout: str, seed: int = 0):
    """(query, k_cache, v_cache, block_tables, seq_lens) of ``rows`` decode rows at positions
    context .. context + rows - 1 of one sequence, its blocks scattered over the cache."""
    gen = torch.Generator().manual_seed(seed)
    blocks = -(-(context + rows) // BLOCK)
    copies = rows if layout == "separate" else 1
    num_blocks = blocks * copies + 4
    k_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    v_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    order = torch.randperm(num_blocks, generator=gen)
    tables = order[: blocks * copies].view(copies, blocks)
    for c in range(1, copies):  # the same tokens, stored again in this row's own blocks
        k_cache[tables[c]] = k_cache[tables[0]]
        v_cache[tables[c]] = v_cache[tables[0]]
    tables = tables.repeat(rows // copies, 1)
    seq_lens = torch.arange(context + 1, context + rows + 1)
    query = torch.randn(rows, HEADS, HEAD_DIM, generator=gen).to(dtype)
    return query, k_cache, v_cache, tables.contiguous(), seq_lens


def best_call_seconds(fn, calls: int, repeats: int) -> float:
    """The fastest of ``repeats`` samples, each the mean of ``calls`` calls (after a warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,2,4,8", help="decode rows per call (1 + drafts)")
    parser.add_argument("--contexts", default="10,400,800", help="tokens before the first row")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--layout", choices=["shared", "separate"], default="shared")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--layers", type=int, default=30, help="layers of a step (SmolLM2: 30)")
    parser.add_argument(
        "--caches",
        type=int,
        default=30,
        help="distinct KV caches the calls cycle through (30: each call finds its K/V out of "
        "the CPU caches, as a step's layers do; 1: the same K/V every call, in cache)",
    )
    parser.add_argument("--calls", type=int, default=210)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    from kernels.cpu import native_ops, unavailable_reason

    ops = native_ops()
    if ops is None:
        sys.exit(f"the native CPU kernels are unavailable: {unavailable_reason()}")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    rows_list = [int(n) for n in args.rows.split(",")]
    contexts = [int(n) for n in args.contexts.split(",")]
    table = []
    with torch.inference_mode():
        for context in contexts:
            one_row = None
            for rows in rows_list:
                layers = [
                    verification_rows(context, rows, dtype, args.layout, seed)
                    for seed in range(args.caches)
                ]
                calls = itertools.cycle(layers)
                seconds = best_call_seconds(
                    lambda c=calls: ops.paged_decode_attention(*next(c), HEAD_DIM**-0.5),
                    args.calls,
                    args.repeats,
                )
                one_row = seconds if rows == 1 else one_row
                ratio = f"{seconds / one_row:.2f}" if one_row else "-"
                table.append((context, rows, seconds * 1e6, seconds * args.layers * 1e3, ratio))
                print(f"context {context:5d}, {rows} rows: {seconds * 1e6:8.1f} us", flush=True)
    load = os.getloadavg()
    print(
        f"\npaged_decode_attention, {HEADS} heads / {KV_HEADS} KV heads x {HEAD_DIM}, "
        f"{args.dtype} cache, {args.layout} block tables, {args.caches} caches cycled, "
        f"threads {torch.get_num_threads()}, "
        f"best of {args.repeats} x {args.calls} calls, load average {load[0]:.2f} {load[1]:.2f}\n"
    )
    print(f"| context | rows | us / call | ms / {args.layers} layers | x one row |")
    print("|---:|---:|---:|---:|---:|")
    for context, rows, us, ms, ratio in table:
        print(f"| {context} | {rows} | {us:.1f} | {ms:.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
