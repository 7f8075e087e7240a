"""A precompiled header for the first build of the CPU kernels.

Parsing ATen's headers is most of each source's compile time: 17 of 26 seconds a source on a
2-core Xeon. ``prelude.h`` holds those headers; GCC compiles it once per build (about 30 s) and
each of the five sources then starts from it (10 s a source instead of 26), which halves the
build's CPU time. The ``.gch`` file is about 400 MB, so it is deleted once the library is
built: ninja's dependency files name only the project's own headers, so nothing rebuilds for
its absence.

Everything here is an optimisation. The precompiled header must be made with the flags torch's
build uses (the same ``-std``, defines and target); where they differ, or where the compiler
is not GCC, GCC ignores it and reads ``prelude.h`` as text, which is the build without it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sysconfig
import time
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

HEADER = Path(__file__).with_name("prelude.h")


def _is_gcc(compiler: str) -> bool:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    # Debian's c++ prints "c++ (Debian 12.2.0-14) 12.2.0" first: the notice names GCC's makers.
    return done.returncode == 0 and "Free Software Foundation" in done.stdout


def _torch_cflags(cpp_extension, name: str, extra_cflags: list[str]) -> list[str]:
    """What torch's ninja file compiles each source with (torch.utils.cpp_extension, for a
    CPU extension that is not a Python module), less the source and output names."""
    includes = [*cpp_extension.include_paths(), sysconfig.get_path("include")]
    flags = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for folder in includes:
        flags += ["-isystem", folder]
    return [*flags, "-fPIC", "-std=c++20", *extra_cflags]


def _already_built(cpp_extension, name: str) -> bool:
    try:
        folder = Path(cpp_extension._get_build_directory(name, verbose=False))
    except (AttributeError, OSError):
        return True  # another torch layout: build as torch does, without the header
    return (folder / f"{name}.so").is_file()


@contextmanager
def precompiled(cpp_extension, name: str, src_folder: Path, extra_cflags: list[str]):
    """Yields the extra flags that make each source start from the prelude, precompiled when
    the library is still to be built; deletes the ``.gch`` file when the build is done.

    The flags are the same whether or not the library is built: ninja rebuilds a library whose
    compile command changed, so every later process would compile again."""
    header = src_folder / HEADER.name  # copied there with the sources (kernels/cpu)
    # -include makes the prelude every source's first header, so GCC takes the .gch beside
    # it, or, where there is none, reads the header itself: the same build.
    flags = ["-include", str(header)]
    compiler = os.environ.get("CXX", "c++")
    if _already_built(cpp_extension, name) or not _is_gcc(compiler):
        yield flags
        return
    gch = src_folder / f"{HEADER.name}.gch"
    _compile_header(compiler, _torch_cflags(cpp_extension, name, extra_cflags), header, gch)
    try:
        yield flags
    finally:
        gch.unlink(missing_ok=True)


def _compile_header(compiler: str, cflags: list[str], header: Path, gch: Path) -> None:
    """Precompiles ``header`` into ``gch``; logs why not where it cannot."""
    partial = gch.with_name(f".{gch.name}.{os.getpid()}")
    start = time.monotonic()
    try:
        done = subprocess.run(
            [compiler, *cflags, "-x", "c++-header", str(header), "-o", str(partial)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode == 0:
            partial.replace(gch)  # atomic: a build in another process may be reading it
            logger.info("precompiled the CPU kernels' headers in %.1fs", time.monotonic() - start)
        else:
            logger.info("no precompiled header for the CPU kernels: %s", done.stderr[-400:])
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("no precompiled header for the CPU kernels: %s", exc)
    finally:
        partial.unlink(missing_ok=True)
