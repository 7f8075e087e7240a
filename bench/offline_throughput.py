"""Offline throughput: this engine vs transformers ``generate`` (padded) and its continuous batching.

The same random-weight checkpoint and the same token-id workload go through
  (a) engine.LLM.generate (this project),
  (b) transformers ``generate`` on left-padded batches,
  (c) transformers continuous batching (the manager behind ``generate_batch``; each request
      gets its own max_new_tokens, attn_implementation "sdpa" as the issue asks for CPU),
and the script prints output tokens/s for each, the ratios, and whether greedy outputs match.

Workload (issue 3, acceptance 5): 64 requests, prompt lengths uniform in [16, 256], output
lengths uniform in [16, 128], ignore_eos, greedy, fp32.

    .venv/bin/python bench/offline_throughput.py                  # makes the ~20M llama itself
    .venv/bin/python bench/offline_throughput.py --model PATH --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_workload(args, vocab_size: int) -> list[tuple[list[int], int]]:
    rng = random.Random(args.seed)
    workload = []
    for _ in range(args.num_requests):
        prompt_len = rng.randint(args.min_prompt, args.max_prompt)
        prompt = [rng.randrange(5, vocab_size) for _ in range(prompt_len)]
        workload.append((prompt, rng.randint(args.min_output, args.max_output)))
    return workload


def run_engine(llm, workload, profile: bool):
    from engine import SamplingParams

    prompts = [{"prompt_token_ids": p} for p, _ in workload]
    params = [SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True) for _, o in workload]
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    outputs = llm.generate(prompts, params)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - start
    tokens = [o.outputs[0].token_ids for o in outputs]
    return tokens, elapsed, profiler


def run_hf_padded(model, workload, batch_size: int, pad_id: int):
    import torch
    from transformers import GenerationConfig

    tokens: list[list[int]] = []
    start = time.perf_counter()
    for b in range(0, len(workload), batch_size):
        chunk = workload[b : b + batch_size]
        width = max(len(p) for p, _ in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, (p, _) in enumerate(chunk):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        max_new = max(o for _, o in chunk)
        config = GenerationConfig(
            max_new_tokens=max_new, do_sample=False, eos_token_id=None, pad_token_id=pad_id
        )
        # generate runs under no_grad itself; inference_mode here would leak inference
        # tensors into transformers' caches and break its continuous batching later.
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        for i, (_, o) in enumerate(chunk):
            tokens.append(out[i, width : width + o].tolist())
    return tokens, time.perf_counter() - start


def run_hf_continuous(model, workload, pad_id: int):
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=max(o for _, o in workload),
        do_sample=False,
        eos_token_id=None,
        pad_token_id=pad_id,
    )
    start = time.perf_counter()
    results = {}
    with (
        torch.inference_mode(),
        model.continuous_batching_context_manager(
            generation_config=config, block=True, timeout=600, warmup=False
        ) as manager,
    ):
        ids = [
            manager.add_request(p, request_id=f"r{i}", max_new_tokens=o)
            for i, (p, o) in enumerate(workload)
        ]
        while len(results) < len(ids):
            result = manager.get_result(timeout=1)
            if result is not None and result.is_finished():
                results[result.request_id] = result.generated_tokens
            elif result is None and not manager.is_running():
                raise RuntimeError("transformers continuous batching stopped early")
    elapsed = time.perf_counter() - start
    return [list(results[i])[:o] for i, (_, o) in zip(ids, workload, strict=True)], elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="checkpoint dir (default: make the small llama)")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--min-prompt", type=int, default=16)
    parser.add_argument("--max-prompt", type=int, default=256)
    parser.add_argument("--min-output", type=int, default=16)
    parser.add_argument("--max-output", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument(
        "--hf-batch-sizes",
        default="16,32,64",
        help="padded generate batch sizes to try; the fastest is compared against",
    )
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--skip-hf", action="store_true", help="run the engine only")
    parser.add_argument("--skip-continuous", action="store_true", help="skip generate_batch")
    parser.add_argument("--profile", action="store_true", help="cProfile the engine run")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = args.model
    if model_path is None:
        from engine.tooling.demo.checkpoint import make_checkpoint

        model_path = str(make_checkpoint(Path(tempfile.mkdtemp()) / "llama-small", size="small"))
    from engine import LLM

    llm = LLM(
        model_path,
        dtype="float32",
        device="cpu",
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    vocab = llm.llm_engine.model_config.vocab_size
    workload = make_workload(args, vocab)
    num_out = sum(o for _, o in workload)
    print(
        f"model {model_path}; {len(workload)} requests, {num_out} output tokens, "
        f"{sum(len(p) for p, _ in workload)} prompt tokens; torch threads "
        f"{torch.get_num_threads()}"
    )

    run_engine(llm, workload[:4], profile=False)  # warm-up (oneDNN kernels, allocator)
    engine_tokens, engine_s, profiler = run_engine(llm, workload, args.profile)
    rates = {"engine": num_out / engine_s}
    print(f"engine                 {engine_s:7.2f} s  {rates['engine']:8.1f} output tok/s")
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        print(text.getvalue())
    if args.skip_hf:
        return

    from transformers import AutoModelForCausalLM

    pad_id = 0
    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    run_hf_padded(model, workload[:4], 4, pad_id)  # warm-up
    best = None
    for batch_size in [int(b) for b in args.hf_batch_sizes.split(",")]:
        hf_tokens, hf_s = run_hf_padded(model, workload, batch_size, pad_id)
        same = sum(a == b for a, b in zip(engine_tokens, hf_tokens, strict=True))
        print(
            f"transformers generate  {hf_s:7.2f} s  {num_out / hf_s:8.1f} output tok/s "
            f"(padded batches of {batch_size}; greedy parity {same}/{len(workload)})"
        )
        if best is None or hf_s < best:
            best = hf_s
    rates["generate"] = num_out / best
    if not args.skip_continuous:
        cb_model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        cb_tokens, cb_s = run_hf_continuous(cb_model, workload, pad_id)
        rates["generate_batch"] = num_out / cb_s
        print(
            f"transformers CB        {cb_s:7.2f} s  {rates['generate_batch']:8.1f} output "
            "tok/s (generate_batch's manager)"
        )
        same_cb = sum(a == b for a, b in zip(engine_tokens, cb_tokens, strict=True))
        print(f"greedy parity with generate_batch: {same_cb}/{len(workload)} identical")
    for name, rate in rates.items():
        if name != "engine":
            print(f"engine / {name}: {rates['engine'] / rate:.2f}x")


if __name__ == "__main__":
    main()
