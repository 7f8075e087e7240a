"""GPU throughput: the nano-vllm workload through ``engine.LLM`` against transformers.

    python bench/gpu_throughput.py [--models qwen3-0.6b,llama-3.1-8b]
                                   [--systems engine,engine_sync,generate_batch,generate]
                                   [--out results.json]

The workload is nano-vllm's bench.py: 256 sequences, prompt and output lengths uniform in
[100, 1024], seed 0, random prompt token ids, ignore_eos, temperature 0.6. Models are random
bf16 weights in the exact shapes of Qwen3-0.6B and Llama-3.1-8B, written as Hugging Face
checkpoints by this script (no download). Each system generates on the same GPU in turn:

- engine: ``engine.LLM(model=path, dtype="bfloat16", device="cuda", attention_backend="triton",
  ...)``, all 256 requests: the Triton kernels of kernels/ for attention, KV writes, RMSNorm,
  rotary and SiLU-and-mul, and decode steps replayed from CUDA graphs (captured at start-up,
  outside the timed region);
- engine_sync: the same with async scheduling off, each step queued after the last one's
  tokens are read (engine/async_steps.py), for the overlap's gain in the same run;
- engine_p512: the same with the decode kernel's contexts always split into partitions of
  512 tokens (its only choice before 2026-11-30) instead of ``decode_partitioning``'s choice
  by the batch's shape, for that choice's gain in the same run;
- generate_batch: transformers' continuous batching (the manager behind ``generate_batch``,
  which takes a per-request max_new_tokens, so it runs the identical workload);
- generate: transformers ``generate`` on left-padded static batches, on the first
  ``--generate-seqs`` sequences (it is slow; its rate is output tokens actually requested).

Reported: output tokens/s and its fraction of the memory-bandwidth roofline, where the
roofline time is what reading the weights once per decode step plus every live sequence's KV
cache at the measured copy bandwidth (and prefill at the measured bf16 matmul rate) would take.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run as a script, Python puts bench/ first on sys.path, where bench/kernels.py would shadow
# the ``kernels`` package: put the repository root there instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(REPO)

ENGINE_TARGET_TOKENS_PER_S = 20_000  # Qwen3-0.6B shape, issue 8
ENGINE_TARGET_SPEEDUP = 1.5  # over transformers generate_batch, issue 8

# Hugging Face config fields of the two published models; weights are random.
MODEL_SHAPES: dict[str, dict] = {
    "qwen3-0.6b": {
        "architecture": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "llama-3.1-8b": {
        "architecture": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500_000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
}


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def num_output_tokens(self) -> int:
        return sum(self.output_lens)

    def head(self, n: int) -> Workload:
        return Workload(self.prompts[:n], self.output_lens[:n])


@dataclass
class Result:
    model: str
    system: str
    num_seqs: int
    output_tokens: int
    seconds: float
    tokens_per_s: float
    roofline_tokens_per_s: float
    roofline_fraction: float
    note: str = ""


# A Qwen3-family model small enough for a CPU: bench/host_step.py runs the workload on it (its
# vocabulary covers the workload's token ids), the tests run every harness on it.
TINY_QWEN3_SHAPE = {
    "architecture": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 10240,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def nano_vllm_workload(
    num_seqs: int = 256,
    max_input_len: int = 1024,
    max_output_len: int = 1024,
    seed: int = 0,
    *,
    min_len: int = 100,
    max_token_id: int = 10000,
) -> Workload:
    """nano-vllm's bench.py workload, drawn in its order from Python's random with ``seed``."""
    rng = random.Random(seed)
    prompts = [
        [rng.randint(0, max_token_id) for _ in range(rng.randint(min_len, max_input_len))]
        for _ in range(num_seqs)
    ]
    output_lens = [rng.randint(min_len, max_output_len) for _ in range(num_seqs)]
    return Workload(prompts, output_lens)


def hf_config(shape: dict, dtype: str = "bfloat16"):
    from transformers import LlamaConfig, Qwen3Config

    fields = {k: v for k, v in shape.items() if k != "architecture"}
    config_class = {"qwen3": Qwen3Config, "llama": LlamaConfig}[shape["architecture"]]
    return config_class(**fields, torch_dtype=dtype, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def weight_counts(shape: dict) -> tuple[int, int]:
    """(parameters read by one decode step, parameters in matrix products per prompt token)."""
    h, inter, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    heads, kv_heads, head_dim = (
        shape["num_attention_heads"],
        shape["num_key_value_heads"],
        shape["head_dim"],
    )
    attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
    qk_norm = 2 * head_dim if shape["architecture"] == "qwen3" else 0  # Qwen3's q/k RMSNorm
    per_layer = attention + 3 * h * inter + 2 * h + qk_norm
    lm_head = shape["vocab_size"] * h
    layer_params = layers * per_layer
    # A step reads every layer and the LM head (the tied or untied table, once) plus the
    # final norm; the embedding lookup touches one row per token, which is negligible.
    return layer_params + lm_head + h, layer_params + lm_head


def kv_bytes_per_token(shape: dict, dtype_bytes: int = 2) -> int:
    return (
        shape["num_hidden_layers"]
        * 2
        * shape["num_key_value_heads"]
        * shape["head_dim"]
        * dtype_bytes
    )


def roofline_seconds(
    shape: dict, workload: Workload, copy_bytes_per_s: float, matmul_flops_per_s: float
) -> float:
    """Lower bound on the workload's time with every sequence batched from the start.

    Decode: step t reads all weights once plus the KV cache of each sequence still running
    (context = prompt + t tokens) at the copy bandwidth. Prefill: 2 FLOPs per weight per
    prompt token at the matmul rate. Attention FLOPs and sampling are left out (small here).
    """
    step_params, prefill_params = weight_counts(shape)
    weight_bytes = 2 * step_params
    kv_per_token = kv_bytes_per_token(shape)
    max_steps = max(workload.output_lens) - 1  # the first token comes out of the prefill
    total_bytes = 0.0
    for t in range(1, max_steps + 1):
        live = [
            len(p) + t
            for p, n in zip(workload.prompts, workload.output_lens, strict=True)
            if n - 1 >= t
        ]
        total_bytes += weight_bytes + kv_per_token * sum(live)
    prompt_tokens = sum(len(p) for p in workload.prompts)
    prefill_seconds = 2 * prefill_params * prompt_tokens / matmul_flops_per_s
    return total_bytes / copy_bytes_per_s + prefill_seconds


def write_checkpoint(shape: dict, directory: Path, device: str = "cuda") -> Path:
    """A random-weight bf16 checkpoint of ``shape``, with the project's demo tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.tooling.demo.tokenizer import train_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    config = hf_config(shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)
    # Prompts arrive as token ids; the tokenizer only turns outputs into (noise) text.
    train_tokenizer(vocab_size=1024).save_pretrained(directory)
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return directory


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run_engine(
    path: Path,
    workload: Workload,
    *,
    device: str = "cuda",
    profile: Path | None = None,
    async_scheduling: bool | None = None,
    cuda_profile: list[tuple[int, int]] | None = None,
    max_model_len: int = 4096,
) -> tuple[int, float]:
    """(output tokens, seconds) for the whole workload through engine.LLM. With ``profile``,
    the workload then runs a second time under cProfile (its time is not the one returned) and
    the stats go to that file, the top functions to stdout: where a step's time goes on the
    host, and how long the host waits for the GPU (the synchronising calls). With
    ``cuda_profile`` (windows of steps), it runs again with the CUDA profiler on in those
    windows, and the GPU's time by kernel is printed (bench/cuda_kernel_time.py)."""
    from engine import LLM, SamplingParams

    llm = LLM(
        model=str(path),
        dtype="bfloat16" if device == "cuda" else "float32",
        device=device,
        max_model_len=max_model_len,
        max_num_seqs=256,
        max_num_batched_tokens=16384,
        enable_prefix_caching=False,
        # Explicit, so a GPU run fails loudly instead of timing the PyTorch fallback.
        attention_backend="triton" if device == "cuda" else "torch",
        async_scheduling=async_scheduling,  # None: on with CUDA (engine/async_steps.py)
    )
    # Warm-up, untimed: Triton compiles a kernel variant the first time it meets it, so run
    # the step shapes the workload makes (whole-prompt prefills, then decodes mixed with
    # prefill chunks, short and long contexts) before the clock starts, sampled as the
    # workload is (the sampler's kernels load on their first call too).
    warm = workload.head(64)
    llm.generate(
        [{"prompt_token_ids": p} for p in warm.prompts],
        [SamplingParams(temperature=0.6, max_tokens=8, ignore_eos=True)] * len(warm.prompts),
    )
    prompts = [{"prompt_token_ids": p} for p in workload.prompts]
    params = [
        SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=n) for n in workload.output_lens
    ]
    compiled_before = triton_cache_entries()
    _synchronize(device)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    _synchronize(device)
    seconds = time.perf_counter() - start
    compiled = triton_cache_entries() - compiled_before
    if compiled:
        # A fresh machine's first run read 5-15% slower than later ones (docs/benchmarks.md,
        # "Fifth run"): say whether Triton compiled inside the timed region.
        print(f"  Triton compiled {compiled} kernel variant(s) inside the timed run", flush=True)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    if profile is not None:
        _profile_generate(llm, prompts, params, profile)
    if cuda_profile:
        from bench.cuda_kernel_time import profile_windows

        run = functools.partial(llm.generate, prompts, params)
        for window in profile_windows(llm, run, cuda_profile):
            print(window.report(), flush=True)
    del llm, outputs
    _release(device)
    return tokens, seconds


ENGINE_SYSTEMS = ("engine", "engine_sync", "engine_p512")


@contextlib.contextmanager
def fixed_decode_partitions(size: int):
    """The decode kernel splits every context longer than ``size`` into partitions of ``size``
    tokens, whatever the batch's shape, while the block runs."""
    from kernels import decode_attention

    chosen = decode_attention.decode_partitioning
    decode_attention.decode_partitioning = lambda num_seqs, num_kv_heads, device: size
    try:
        yield
    finally:
        decode_attention.decode_partitioning = chosen


def triton_cache_entries() -> int:
    """How many compiled kernels Triton's on-disk cache holds (one folder each); 0 without
    one. A count that grows across a timed run means Triton compiled inside it."""
    try:
        from triton import knobs

        root = Path(knobs.cache.dir)
    except (ImportError, AttributeError):  # triton before 3.4, or none
        root = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return sum(1 for _ in root.iterdir()) if root.is_dir() else 0


def _profile_generate(llm, prompts, params, out: Path) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(llm.generate, prompts, params)
    print(f"  profiled run: {time.perf_counter() - start:.1f} s under cProfile", flush=True)
    profiler.dump_stats(out)
    for order in ("tottime", "cumulative"):
        pstats.Stats(profiler).sort_stats(order).print_stats(30)


def _load_transformers(path: Path, device: str, attn_implementation: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=torch.bfloat16 if device == "cuda" else torch.float32,
        attn_implementation=attn_implementation,
    ).to(device)
    model.eval()
    return model


def _sampling_config(max_new_tokens: int, *, fixed_length: bool):
    from transformers import GenerationConfig

    # Every request must produce exactly its length, as with ignore_eos. Continuous batching
    # takes eos_token_id=-1 as "off"; padded generate gets min_new_tokens instead.
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens if fixed_length else None,
        do_sample=True,
        temperature=0.6,
        top_k=0,
        top_p=1.0,
        eos_token_id=None if fixed_length else -1,
        pad_token_id=0,
    )


def run_generate_batch(
    path: Path, workload: Workload, *, device: str = "cuda"
) -> tuple[int, float]:
    """transformers continuous batching with per-request lengths: (output tokens, seconds)."""
    model = _load_transformers(path, device, "sdpa")
    config = _sampling_config(max(workload.output_lens), fixed_length=False)
    tokens = 0
    options = {"generation_config": config, "block": True}
    # transformers releases differ: the GPU image's older one may not take ``warmup``.
    parameters = inspect.signature(model.continuous_batching_context_manager).parameters
    if "warmup" in parameters:
        options["warmup"] = device == "cuda"  # captures its CUDA graphs before the clock starts
    if device != "cuda" and "continuous_batching_config" in parameters:
        options["continuous_batching_config"] = _cpu_cache_config(workload)
    with model.continuous_batching_context_manager(**options) as manager:
        _synchronize(device)
        start = time.perf_counter()
        request_ids = {
            manager.add_request(prompt, max_new_tokens=n)
            for prompt, n in zip(workload.prompts, workload.output_lens, strict=True)
        }
        finished: set[str] = set()
        while finished != request_ids:
            result = manager.get_result(timeout=600)
            if result is None:
                raise RuntimeError(
                    f"transformers continuous batching stopped with {len(finished)} of "
                    f"{len(request_ids)} requests finished"
                )
            if result.is_finished() and result.request_id not in finished:
                finished.add(result.request_id)
                tokens += len(result.generated_tokens)
        _synchronize(device)
        seconds = time.perf_counter() - start
    del model
    _release(device)
    return tokens, seconds


def _cpu_cache_config(workload: Workload):
    """A paged cache just big enough for ``workload``: on a CPU, transformers sizes it from
    the host's free memory and zeroes it, which took 16 of the 18 s the CPU test spent on
    three 8-token requests (transformers 5.24)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    page = 256
    longest = max(len(p) + n for p, n in zip(workload.prompts, workload.output_lens, strict=True))
    num_blocks = len(workload.prompts) * -(-longest // page)
    return ContinuousBatchingConfig(page_size=page, num_blocks=num_blocks, max_batch_tokens=page)


def run_generate(
    path: Path, workload: Workload, *, batch_size: int, device: str = "cuda"
) -> tuple[int, float]:
    """transformers generate on left-padded static batches: (requested output tokens, seconds).

    A static batch runs until its longest request is done; only the tokens each request asked
    for are counted, so the padding work shows up as a lower rate.
    """
    import torch

    model = _load_transformers(path, device, "sdpa")
    model.generate(torch.tensor([[1, 2, 3]], device=device), **_generate_kwargs(4))  # warm-up
    _synchronize(device)
    start = time.perf_counter()
    for first in range(0, len(workload.prompts), batch_size):
        batch = workload.head(first + batch_size).prompts[first:]
        lens = workload.output_lens[first : first + batch_size]
        longest = max(len(p) for p in batch)
        input_ids = torch.zeros(len(batch), longest, dtype=torch.long)
        attention_mask = torch.zeros(len(batch), longest, dtype=torch.long)
        for row, prompt in enumerate(batch):
            input_ids[row, longest - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, longest - len(prompt) :] = 1
        out = model.generate(
            input_ids.to(device),
            attention_mask=attention_mask.to(device),
            **_generate_kwargs(max(lens)),
        )
        if out.shape[1] - longest != max(lens):
            raise RuntimeError(f"generate made {out.shape[1] - longest} tokens, not {max(lens)}")
    _synchronize(device)
    seconds = time.perf_counter() - start
    del model
    _release(device)
    return workload.num_output_tokens, seconds


def _generate_kwargs(max_new_tokens: int) -> dict:
    return {"generation_config": _sampling_config(max_new_tokens, fixed_length=True)}


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit(
            f"{Path(sys.argv[0]).name} needs a CUDA GPU and none is visible "
            "(torch.cuda.is_available() is False). Run it on a GPU machine "
            "(see docs/kernels.md); CPU throughput is measured by the CPU benchmarks."
        )


def print_results(results: list[Result]) -> None:
    print(
        f"\n{'model':14} {'system':15} {'seqs':>5} {'out tokens':>11} {'seconds':>9} "
        f"{'tokens/s':>10} {'roofline':>10} {'of roof':>8}"
    )
    for r in results:
        print(
            f"{r.model:14} {r.system:15} {r.num_seqs:5d} {r.output_tokens:11d} {r.seconds:9.2f} "
            f"{r.tokens_per_s:10,.0f} {r.roofline_tokens_per_s:10,.0f} {r.roofline_fraction:8.1%}"
            f" {r.note}"
        )
    by_key = {(r.model, r.system): r for r in results}
    engine, baseline = (
        by_key.get(("qwen3-0.6b", "engine")),
        by_key.get(("qwen3-0.6b", "generate_batch")),
    )
    if engine:
        verdict = "meets" if engine.tokens_per_s >= ENGINE_TARGET_TOKENS_PER_S else "MISSES"
        print(
            f"qwen3-0.6b engine {engine.tokens_per_s:,.0f} tok/s: {verdict} the 20,000 tok/s target"
        )
    if engine and baseline:
        ratio = engine.tokens_per_s / baseline.tokens_per_s
        verdict = "meets" if ratio >= ENGINE_TARGET_SPEEDUP else "MISSES"
        print(f"qwen3-0.6b engine / generate_batch = {ratio:.2f}x: {verdict} the 1.5x target")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default=",".join(MODEL_SHAPES))
    parser.add_argument("--systems", default="engine,generate_batch,generate")
    parser.add_argument("--num-seqs", type=int, default=256)
    parser.add_argument(
        "--generate-seqs",
        type=int,
        default=64,
        help="sequences for the slow padded-generate baseline",
    )
    parser.add_argument("--generate-batch-size", type=int, default=64)
    parser.add_argument("--workdir", type=Path, help="where checkpoints go (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    parser.add_argument(
        "--profile", type=Path, help="after the timed engine run, run it again under cProfile"
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=4096,
        help="the engine's max_model_len (the bound a CUDA graph's decode attention is sized by)",
    )
    parser.add_argument(
        "--cuda-profile",
        default="",
        help="after the timed engine run, run it again with the CUDA profiler on in these "
        "windows of steps (FIRST:STEPS,...; e.g. 50:40,600:40) and print the GPU's time by kernel",
    )
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    systems = [s for s in args.systems.split(",") if s]
    unknown = [m for m in models if m not in MODEL_SHAPES] + [
        s for s in systems if s not in (*ENGINE_SYSTEMS, "generate_batch", "generate")
    ]
    if unknown:
        parser.error(f"unknown model(s) or system(s): {', '.join(unknown)}")
    try:
        windows = [
            (int(first), int(steps))
            for first, steps in (w.split(":") for w in args.cuda_profile.split(",") if w)
        ]
    except ValueError:
        parser.error(f"--cuda-profile takes FIRST:STEPS,...; got {args.cuda_profile!r}")
    require_cuda()
    import torch

    from kernels.ceilings import measure_ceilings

    ceilings = measure_ceilings()
    print(
        f"device: {torch.cuda.get_device_name()}; copy {ceilings.copy_bytes_per_s / 1e9:.0f} GB/s,"
        f" bf16 matmul {ceilings.matmul_flops_per_s / 1e12:.0f} TFLOP/s (measured now)",
        flush=True,
    )
    workload = nano_vllm_workload(args.num_seqs)
    lengths = {"max_model_len": args.max_model_len}
    results: list[Result] = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for model_name in models:
            shape = MODEL_SHAPES[model_name]
            path = write_checkpoint(shape, Path(tmp) / model_name)
            for system in systems:
                used = workload.head(args.generate_seqs) if system == "generate" else workload
                print(f"{model_name} / {system}: {len(used.prompts)} sequences ...", flush=True)
                try:
                    if system == "engine":
                        profile = args.profile and args.profile.with_suffix(f".{model_name}.prof")
                        tokens, seconds = run_engine(
                            path, used, profile=profile, cuda_profile=windows, **lengths
                        )
                    elif system == "engine_sync":
                        tokens, seconds = run_engine(path, used, async_scheduling=False, **lengths)
                    elif system == "engine_p512":
                        with fixed_decode_partitions(512):
                            tokens, seconds = run_engine(path, used, **lengths)
                    elif system == "generate_batch":
                        tokens, seconds = run_generate_batch(path, used)
                    else:
                        tokens, seconds = run_generate(
                            path, used, batch_size=args.generate_batch_size
                        )
                except Exception as error:  # one failing system must not hide the others
                    print(f"  failed: {error!r}", flush=True)
                    _release("cuda")
                    continue
                roof = roofline_seconds(
                    shape, used, ceilings.copy_bytes_per_s, ceilings.matmul_flops_per_s
                )
                note = (
                    ""
                    if tokens == used.num_output_tokens
                    else (f"expected {used.num_output_tokens} tokens")
                )
                result = Result(
                    model_name,
                    system,
                    len(used.prompts),
                    tokens,
                    seconds,
                    tokens / seconds,
                    used.num_output_tokens / roof,
                    roof / seconds,
                    note,
                )
                results.append(result)
                print(f"  {result.tokens_per_s:,.0f} output tokens/s", flush=True)
            # the checkpoint of one model is removed before the next is written
            shutil.rmtree(path, ignore_errors=True)
    print_results(results)
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(),
                    "date": time.strftime("%Y-%m-%d"),
                    "ceilings": asdict(ceilings),
                    "results": [asdict(r) for r in results],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
