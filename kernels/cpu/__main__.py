"""``python -m kernels.cpu``: build the native CPU kernels now (not at the first model load)."""

from __future__ import annotations

import sys
import time

from kernels.cpu import _cpu_flags, native_ops, target_arch, unavailable_reason


def main() -> int:
    start = time.monotonic()
    if native_ops() is None:
        print(f"CPU kernels unavailable (PyTorch fallbacks will run): {unavailable_reason()}")
        return 1
    flags = set(_cpu_flags().split())
    if target_arch() != "native":
        simd = f"-march={target_arch()}"
    elif {"avx2", "fma"} <= flags:
        # The wider paths the sources have (#if on the compiler's -march=native macros).
        simd = "+".join(
            ["AVX2", "FMA"]
            + (["AVX512"] if "avx512f" in flags else [])
            + (["AVX512-VNNI"] if {"avx512bw", "avx512dq", "avx512_vnni"} <= flags else [])
        )
    else:
        simd = "scalar (no AVX2/FMA on this CPU)"
    print(f"CPU kernels ready ({simd}) in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
