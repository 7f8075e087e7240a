"""Device ceilings measured in the same run as a benchmark: copy bandwidth and matmul rate.

Datasheet numbers are leads; a kernel's efficiency is reported against what this device, in this
state, actually does. Both measurements use random data (zeros run faster on some GPUs) and, on
a GPU, buffers several times the L2 cache, timed with CUDA events through
``triton.testing.do_bench``. On CPU (only for smoke-testing the benchmark scripts) a wall clock
stands in.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Ceilings:
    copy_bytes_per_s: float  # device-to-device copy, bytes read + bytes written
    matmul_flops_per_s: float  # dense matrix product in the benchmark's dtype (bf16 on GPU)


def median_ms(fn, *, device: str = "cuda", warmup_ms: int = 25, rep_ms: int = 200) -> float:
    """Median time of ``fn`` in milliseconds after a warm-up (CUDA events on a GPU)."""
    if device == "cuda":
        import triton.testing

        return float(
            triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        )
    fn()
    times = []
    for _ in range(3 if rep_ms >= 100 else 1):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure_copy_bandwidth(num_bytes: int = 4 << 30, device: str = "cuda") -> float:
    """Bytes per second of a large device-to-device copy, counting bytes read plus written."""
    src = torch.randn(num_bytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device=device)
    return 2 * num_bytes / (ms * 1e-3)


def measure_matmul_rate(
    size: int = 8192, dtype: torch.dtype = torch.bfloat16, device: str = "cuda"
) -> float:
    """FLOP per second of a size^3 matrix product on random inputs."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    ms = median_ms(lambda: a @ b, device=device)
    return 2 * size**3 / (ms * 1e-3)


def measure_ceilings(device: str = "cuda") -> Ceilings:
    """Copy bandwidth and bf16 matmul rate of the GPU (small float32 stand-ins on CPU)."""
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("measuring GPU ceilings needs a CUDA device")
        ceilings = Ceilings(measure_copy_bandwidth(), measure_matmul_rate())
        torch.cuda.empty_cache()  # hand the measurement buffers back before the benchmark
        return ceilings
    return Ceilings(
        measure_copy_bandwidth(64 << 20, device=device),
        measure_matmul_rate(512, torch.float32, device=device),
    )
