"""The offline workload through Redis (engine process + EngineClient) vs the offline engine.

Issue 4, acceptance 6: the same requests as bench/offline_throughput.py (its make_workload,
same arguments and seed) run (a) in-process through ``engine.LLM.generate`` and (b) through a
private Redis: one ``python -m engine`` process and this process as the API side, submitting
every request at once with ``EngineClient.generate`` and detokenizing the streams as an API
process does. Rounds alternate (a) and (b) so background load hits both alike; the script
prints output tokens/s of each round, the medians, their ratio, and checks that the greedy
tokens of both paths are identical.

    .venv/bin/python bench/redis_throughput.py                  # makes the ~20M llama itself
    .venv/bin/python bench/redis_throughput.py --model PATH --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _offline_bench():
    """bench/offline_throughput.py as a module: its workload definition is the reference."""
    spec = importlib.util.spec_from_file_location(
        "offline_throughput", REPO / "bench" / "offline_throughput.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_offline(llm, workload) -> tuple[list[list[int]], float]:
    from engine import SamplingParams

    prompts = [{"prompt_token_ids": p} for p, _ in workload]
    params = [SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True) for _, o in workload]
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return [list(o.outputs[0].token_ids) for o in outputs], elapsed


async def run_redis(client, tokenizer, model: str, workload) -> tuple[list[list[int]], float]:
    from inference.transport.engine_client import EngineRequest, SamplingOptions

    async def one(prompt, max_tokens):
        tokens: list[int] = []
        text: list[str] = []
        sampling = SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        async for chunk in client.generate(
            EngineRequest.build(model=model, prompt_token_ids=prompt, sampling=sampling), tokenizer
        ):
            tokens += chunk.token_ids
            text.append(chunk.text)
        return tokens

    start = time.perf_counter()
    results = await asyncio.gather(*[one(p, o) for p, o in workload])
    return results, time.perf_counter() - start


def main() -> None:
    offline = _offline_bench()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint dir (default: make the small llama)")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--min-prompt", type=int, default=16)
    parser.add_argument("--max-prompt", type=int, default=256)
    parser.add_argument("--min-output", type=int, default=16)
    parser.add_argument("--max-output", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each path")
    args = parser.parse_args()

    import torch

    from controlplane.launcher.stack import Stack
    from engine import LLM
    from engine.text.tokenizer import ChatTokenizer
    from inference.transport.engine_client import EngineClient

    workdir = Path(tempfile.mkdtemp(prefix="redis-bench-"))
    model_path = args.model
    if model_path is None:
        from engine.tooling.demo.checkpoint import make_checkpoint

        model_path = str(make_checkpoint(workdir / "llama-small", size="small"))
    llm = LLM(
        model_path,
        dtype="float32",
        device="cpu",
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    workload = offline.make_workload(args, llm.llm_engine.model_config.vocab_size)
    num_out = sum(o for _, o in workload)
    print(
        f"model {model_path}; {len(workload)} requests, {num_out} output tokens, "
        f"{sum(len(p) for p, _ in workload)} prompt tokens; torch threads "
        f"{torch.get_num_threads()}; {os.cpu_count()} CPUs"
    )
    tokenizer = ChatTokenizer(model_path)
    prefix = "bench"
    stack = Stack(workdir, redis_prefix=prefix)
    redis_url = stack.start_redis()
    # The launcher waits until the engine has published its status (its model loaded).
    stack.start_engine(
        model_path,
        "bench",
        name="engine",
        device="cpu",
        dtype="float32",
        max_num_batched_tokens=args.max_num_batched_tokens,
    )

    async def session():
        client = EngineClient(redis_url, prefix=prefix, silence_timeout=300.0, max_waiting=10**6)
        await run_redis(client, tokenizer, "bench", workload[:4])  # warm-up
        run_offline(llm, workload[:4])
        offline_rates, redis_rates = [], []
        same = True
        for round_no in range(args.rounds):
            off_tokens, off_s = run_offline(llm, workload)
            red_tokens, red_s = await run_redis(client, tokenizer, "bench", workload)
            same = same and off_tokens == red_tokens
            offline_rates.append(num_out / off_s)
            redis_rates.append(num_out / red_s)
            print(
                f"round {round_no + 1}: offline {off_s:6.2f} s {offline_rates[-1]:8.1f} tok/s | "
                f"redis {red_s:6.2f} s {redis_rates[-1]:8.1f} tok/s | "
                f"ratio {redis_rates[-1] / offline_rates[-1]:.2f}",
                flush=True,
            )
        await client.close()
        return offline_rates, redis_rates, same

    try:
        offline_rates, redis_rates, same = asyncio.run(session())
    finally:
        stack.stop()
    # Other processes' load changes between and within rounds; the best round of each path is
    # the one least disturbed, and the paired ratio compares rounds run back to back.
    off, red = max(offline_rates), max(redis_rates)
    paired = statistics.median(r / o for r, o in zip(redis_rates, offline_rates, strict=True))
    print(f"offline engine (best round)  {off:8.1f} output tok/s")
    print(f"through Redis (best round)   {red:8.1f} output tok/s")
    print(f"ratio of best rounds         {red / off:8.2f}  (target >= 0.85)")
    print(f"median of per-round ratios   {paired:8.2f}")
    print(f"greedy tokens identical on both paths: {same}")


if __name__ == "__main__":
    main()
