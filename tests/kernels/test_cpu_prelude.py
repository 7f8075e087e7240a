"""The CPU kernels' first build starts each source from a precompiled header (kernels/cpu/prelude.py).

GCC ignores a precompiled header made with other flags than the source's and reads the header
as text, so a torch release that changes its build flags would quietly double the first build's
time (and CI's, which builds the kernels three times on AVX512 machines). These read the build
this test run made.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from torch.utils import cpp_extension

from kernels.cpu import _build_name, _stable_sources, native_ops
from kernels.cpu.prelude import _torch_cflags

REPO = Path(__file__).resolve().parents[2]


def _build_folder() -> Path:
    assert native_ops() is not None
    return Path(cpp_extension._get_build_directory(_build_name(), verbose=False))


def test_the_header_was_made_with_the_flags_torch_compiles_the_sources_with():
    ninja = (_build_folder() / "build.ninja").read_text()
    line = next(x for x in ninja.splitlines() if x.startswith("cflags = "))
    used = shlex.split(line.removeprefix("cflags = "))
    ours = _torch_cflags(cpp_extension, _build_name(), [])
    assert used[: len(ours)] == ours
    assert used[-2] == "-include" and used[-1].endswith("/prelude.h")


def test_no_precompiled_header_is_left_on_disk():
    _build_folder()
    source_folder = _stable_sources(_build_name())[0].parent
    assert (source_folder / "prelude.h").is_file()
    assert not list(source_folder.glob("*.gch*"))


def test_a_later_process_loads_the_built_library_without_compiling():
    """The compile command must not change once the library is built (ninja would rebuild it
    in every process that loads the kernels)."""
    library = _build_folder() / f"{_build_name()}.so"
    before = library.stat().st_mtime_ns
    code = "from kernels.cpu import native_ops; assert native_ops() is not None"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=300)
    assert library.stat().st_mtime_ns == before
