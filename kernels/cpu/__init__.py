"""Native CPU kernels (C++, AVX2/FMA where the CPU has them), built on first use.

The Triton kernels of this package serve GPUs. On a CPU, PyTorch's big operators (GEMMs,
attention) are fast, but decode also runs hundreds of small ones a step, each costing more in
dispatch than in arithmetic, and weight-only quantized matmuls of a few rows have no fast
PyTorch kernel without bf16 hardware. So:

- ``quantized_linear.cpp``: int8 and int4 (Q4_1) matrix-vector products for decode;
- ``layer_ops.cpp``: RMSNorm (with the residual add), rotary embedding and SiLU-and-mul as one
  op each, float32 or bfloat16;
- ``attention.cpp``: decode attention read straight from the paged KV cache, and the KV write,
  float32 or bfloat16 (``vec.h`` holds what the two dtypes share);
- ``prefill_attention.cpp``: the attention of a short prompt chunk after cached context (a
  conversation's next turn), read straight from the paged KV cache too;
- ``decode_layers.cpp``: a decode step's decoder layers in one call, running the ops above
  (declared for C++ callers in ``ops.h``) with no Python between them.

They are registered as ``torch.ops.platform_cpu.*``; each has a PyTorch reference with the same
arguments (kernels/cpu/reference.py, kernels/reference).

The source is compiled once per machine with the C++ compiler torch uses (``-march=native``,
so the build is specific to this CPU and its name carries a hash of the CPU's flags, the
target, the source and the torch version) into torch's extension cache
(``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``), from copies of the sources
kept there too, so that every checkout on the machine shares the build. The first build takes
15 to 70 seconds (ATen's headers precompiled once, then the five sources: kernels/cpu/prelude.py);
later processes, and fresh clones, load the cached library. ``PLATFORM_CPU_KERNELS_MARCH`` builds
for another target than this CPU (``x86-64-v3``: AVX2 without the AVX512 paths). The engine
builds them at start on a CPU device.

``native_ops()`` returns the op namespace, or None with the reason in ``unavailable_reason()``
(no compiler, a failed build, or ``PLATFORM_CPU_KERNELS=0``); callers then run the PyTorch
references. ``python -m kernels.cpu`` builds them ahead of time (bin/bootstrap does) and says
which CPU features they use.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

from kernels.cpu.prelude import precompiled

logger = logging.getLogger(__name__)

SOURCES = [
    Path(__file__).with_name(n)
    for n in (
        "quantized_linear.cpp",
        "layer_ops.cpp",
        "attention.cpp",
        "prefill_attention.cpp",
        "decode_layers.cpp",
    )
]
HEADERS = [Path(__file__).with_name(n) for n in ("vec.h", "ops.h", "prelude.h")]
_unavailable: list[str] = []


def _cpu_flags() -> str:
    """The CPU's feature flags (what ``-march=native`` compiles for)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def target_arch() -> str:
    """What ``-march`` the kernels are built for: ``PLATFORM_CPU_KERNELS_MARCH`` (for example
    ``x86-64-v3``, AVX2 and FMA without AVX512, to build for a fleet of mixed CPUs), else
    ``native``, this CPU."""
    return os.environ.get("PLATFORM_CPU_KERNELS_MARCH", "native").strip() or "native"


def _build_name() -> str:
    digest = hashlib.sha256()
    parts = [src.read_bytes() for src in SOURCES + HEADERS] + [
        _cpu_flags().encode(),
        target_arch().encode(),
        torch.__version__.encode(),
        # The torch the build compiles and links against, where it is installed: ninja's
        # commands name its include folders, so two virtualenvs sharing one build folder
        # rebuilt it in turn (each waiting on the other's lock) on every engine start.
        str(Path(torch.__file__).parent).encode(),
    ]
    for part in parts:
        digest.update(part)
    return f"platform_cpu_{digest.hexdigest()[:12]}"


def _stable_sources(build_name: str) -> list[Path]:
    """The sources, copied once beside torch's extension cache under the build's name.

    The build is keyed by the sources' content, but ninja rebuilds when their path or mtime
    changes, so every fresh clone of the project would compile again (30 seconds and more).
    Copies at a path named after the content let every checkout on this machine reuse one
    build."""
    root = Path(
        os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
    )
    folder = root / f"{build_name}-src"
    folder.mkdir(parents=True, exist_ok=True)
    for src in SOURCES + HEADERS:
        copy = folder / src.name
        if not copy.is_file():
            partial = folder / f".{src.name}.{os.getpid()}"
            shutil.copyfile(src, partial)
            partial.replace(copy)  # atomic: another process may be copying too
    return [folder / src.name for src in SOURCES]


# No build takes this long, even on a loaded 2-core machine (about 2 minutes at worst).
STALE_LOCK_S = 10 * 60


def _clear_stale_build_lock(cpp_extension, build_name: str) -> None:
    """Remove torch's build lock if a build killed half way (Ctrl-C, an OOM kill) left it:
    every later build, and so every engine start, would wait on it for ever."""
    try:
        lock = Path(cpp_extension._get_build_directory(build_name, verbose=False)) / "lock"
        age = time.time() - lock.stat().st_mtime
    except (AttributeError, OSError):  # no lock (the usual case), or another torch layout
        return
    if age > STALE_LOCK_S:
        logger.warning("removing a stale CPU kernel build lock (%.0f s old): %s", age, lock)
        lock.unlink(missing_ok=True)


@functools.cache
def native_ops():
    """``torch.ops.platform_cpu`` with the kernels loaded, or None (see the reason)."""
    if os.environ.get("PLATFORM_CPU_KERNELS", "1") == "0":
        _unavailable.append("PLATFORM_CPU_KERNELS=0")
        return None
    from torch.utils import cpp_extension

    if shutil.which("ninja") is None:
        # The ninja pip package installs beside this interpreter, which need not be on PATH
        # (``.venv/bin/python`` run directly); torch looks the build tool up there.
        os.environ["PATH"] = (
            f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        )
    start = time.monotonic()
    name = _build_name()
    _clear_stale_build_lock(cpp_extension, name)
    # -fopenmp: ATen's parallel_for splits output rows over torch's OpenMP threads (the
    # library resolves to the libgomp torch already loaded, so they share one pool).
    # -ffp-contract=off: no fused multiply-adds the source did not ask for, so the
    # elementwise ops round as their PyTorch references do.
    cflags = ["-O3", f"-march={target_arch()}", "-fopenmp", "-ffp-contract=off"]
    sources = _stable_sources(name)
    try:
        with precompiled(cpp_extension, name, sources[0].parent, cflags) as prelude_flags:
            cpp_extension.load(
                name=name,
                sources=[str(src) for src in sources],
                extra_cflags=cflags + prelude_flags,
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
                verbose=False,
            )
    except Exception as exc:
        # The compiler's complaint comes last, after the command lines.
        detail = str(exc).strip()
        detail = detail if len(detail) <= 600 else "..." + detail[-600:]
        _unavailable.append(f"building the CPU kernels failed: {detail}")
        logger.warning("native CPU kernels unavailable: %s", _unavailable[-1])
        return None
    logger.info("native CPU kernels ready in %.1fs", time.monotonic() - start)
    return torch.ops.platform_cpu


def unavailable_reason() -> str | None:
    """Why ``native_ops()`` returned None, or None when the kernels are loaded."""
    return None if native_ops() is not None else _unavailable[-1]
