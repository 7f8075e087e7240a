"""The native CPU kernels built for a plain AVX2 target (``PLATFORM_CPU_KERNELS_MARCH``) pass the
same tests as the build for this CPU.

On an AVX512 machine the default build runs the AVX512 and VNNI paths, and the AVX2 code that
every other x86 CPU runs would go untested; this builds it for x86-64-v3 (AVX2, FMA, F16C, no
AVX512) in a subprocess and runs the kernel tests against it. On a CPU without AVX512 the
build for the CPU already is that code, which the kernel tests themselves run (a second run took
80-220 s of CI's time on the AVX2-only EPYC for nothing more). Where it runs, a baseline
x86-64 build (no AVX2) runs the chunk attention's tests too: that kernel's plain C++ path,
which ARM builds take.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.cpu import _cpu_flags

REPO = Path(__file__).resolve().parents[2]
KERNEL_TESTS = [
    "tests/kernels/test_cpu_quantized_linear.py",
    "tests/kernels/test_cpu_layer_ops.py",
    "tests/kernels/test_cpu_attention.py",
    "tests/kernels/test_cpu_prefill_attention.py",
    "tests/kernels/test_cpu_decode_layers.py",
    "tests/kernels/test_cpu_row_invariance.py",
]


def cpu_has_avx512() -> bool:
    """Whether this machine's own build compiles the AVX512 paths (kernels/cpu/vec.h: on
    ``__AVX512F__``); without them it already is the AVX2 build these tests run."""
    return "avx512f" in _cpu_flags().split()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64-v3 is an x86 target")
@pytest.mark.skipif(
    platform.machine() == "x86_64" and not cpu_has_avx512(),
    reason="no AVX512 on this CPU: its own build runs the AVX2 paths, in the kernel tests",
)
def test_the_avx2_build_passes_the_kernel_tests():
    _passes_with_kernels_built_for("x86-64-v3", KERNEL_TESTS)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 is an x86 target")
@pytest.mark.skipif(
    platform.machine() == "x86_64" and not cpu_has_avx512(),
    reason="run where the AVX2 build is tested too: one machine kind covers the plain C++",
)
def test_the_build_without_avx2_passes_the_chunk_attention_tests():
    """The plain C++ path of prefill_attention.cpp (what an ARM build runs), on a baseline
    x86-64 build: the kernels with no SIMD path of their own."""
    _passes_with_kernels_built_for("x86-64", ["tests/kernels/test_cpu_prefill_attention.py"])


def _passes_with_kernels_built_for(march: str, tests: list[str]) -> None:
    env = {**os.environ, "PLATFORM_CPU_KERNELS_MARCH": march}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout
