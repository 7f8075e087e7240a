"""The engine's command-line options and the EngineConfig they build (as vLLM's EngineArgs):
``python -m engine`` and ``manage.py run_engine`` add the service's own options beside them."""

from __future__ import annotations

import argparse

from engine.config import EngineConfig


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--num-gpu-blocks", type=int, default=None, help="fix the KV cache size")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument(
        "--no-async-scheduling",
        action="store_true",
        help="on a GPU, schedule each step after the last one's tokens are read (debugging)",
    )
    parser.add_argument(
        "--quantization",
        default=None,
        choices=["int8", "int4"],
        help="weight-only quantized projections (CPU); default: the served model's setting",
    )
    parser.add_argument(
        "--cpu-kv-cache-space",
        type=float,
        default=None,
        help="GiB for the KV cache on CPU (default: $PLATFORM_CPU_KVCACHE_SPACE, else 10%% of "
        "available memory, at most 4)",
    )
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="torch intra-op threads on CPU (default: torch's, one per core)",
    )
    parser.add_argument(
        "--fixed-cpu-threads",
        action="store_true",
        help="run every CPU step on --cpu-threads threads, even while other processes on the "
        "host use those cores (default: fewer then)",
    )
    parser.add_argument(
        "--no-speculative-decoding",
        action="store_true",
        help="turn off draft-free speculative decoding (n-gram and suffix-cache proposals)",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=7,
        help="most draft tokens verified per step (over all sequences: one row per sequence, "
        "the rest drafts, at most this plus one)",
    )
    parser.add_argument(
        "--speculative-max-num-seqs",
        type=int,
        default=8,
        help="no speculation in steps with more running sequences than this",
    )
    parser.add_argument(
        "--scheduling-policy",
        default="fair",
        choices=["fair", "fcfs", "priority"],
        help="fair (default): interactive before batch, then a weighted fair share across "
        "tenants, then `priority` inside a tenant; priority: lower `priority` first; fcfs: "
        "arrival order",
    )
    parser.add_argument(
        "--fair-step-tokens",
        type=int,
        default=512,
        help="under the fair policy, the prompt tokens a step computes when its prompt work "
        "comes from two tenants (or service classes) or more, so a short request is not stuck "
        "behind a flood's long prompt chunks (0: no cap; one tenant's prompts alone always get "
        "--max-num-batched-tokens)",
    )
    parser.add_argument(
        "--batch-step-seqs",
        type=int,
        default=8,
        help="under the fair policy, the batch-class requests (Batch API lines) a step computes "
        "while interactive requests keep arriving, so their steps stay short (0: no cap; with "
        "no interactive request in the last 10 s, batch lines use the whole batch)",
    )
    parser.add_argument(
        "--no-step-preemption",
        action="store_true",
        help="under the fair policy on CPU, do not run a returning tenant's short request "
        "between two layers of the step in flight (it then waits for that step to end)",
    )


def engine_config_from_args(args: argparse.Namespace, model_path: str) -> EngineConfig:
    gib = args.cpu_kv_cache_space
    if gib is not None and gib <= 0:
        raise ValueError(f"--cpu-kv-cache-space must be a positive number of GiB, got {gib}")
    return EngineConfig(
        model=str(model_path),
        dtype=args.dtype,
        device=args.device,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_prefix_caching=not args.no_prefix_caching,
        async_scheduling=False if args.no_async_scheduling else None,
        scheduling_policy=args.scheduling_policy,
        fair_step_tokens=args.fair_step_tokens,
        batch_step_seqs=args.batch_step_seqs,
        step_preemption=not args.no_step_preemption,
        quantization=args.quantization,
        cpu_kv_cache_bytes=None if gib is None else int(gib * 2**30),
        cpu_threads=args.cpu_threads,
        fixed_cpu_threads=args.fixed_cpu_threads,
        enable_speculative_decoding=not args.no_speculative_decoding,
        num_speculative_tokens=args.num_speculative_tokens,
        speculative_max_num_seqs=args.speculative_max_num_seqs,
    )
