"""One request served end to end by the whole platform, on whatever device the engine finds.

    python bench/gpu_serve_check.py [--workdir DIR] [--port 8000]

In a fresh ``PLATFORM_VAR_DIR``: migrate, write a random-weight qwen3 checkpoint with the
demo tokenizer (``make_demo_model``), register it (``load_model``), then ``manage.py serve``,
which starts Redis, the node agent and the model's engine (device ``auto``: the GPU where
there is one), Celery and Daphne. Once serve prints its demo key, the official ``openai``
SDK asks for a chat completion, streamed and not; then serve is stopped with SIGINT as
Ctrl-C would, and the engine's log is searched for its device, the CUDA graphs it captured
and the first step replayed from one. Exit status 0 when every check passed.

On a lent GPU machine it runs as ``bench/gpu_check.sh``'s ``serve`` step, with the
platform's Python dependencies carried as wheels (docs/kernels.md, "GPU benchmarks").
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "gpu-check-qwen3"
UP_TIMEOUT_S = 240
LOG_CHECKS = {
    "engine on": r"loaded .* on (\S+) as (\S+)",
    "KV cache": r"KV cache: .*",
    "graphs captured": r"captured decode CUDA graphs for batch sizes .*",
    "graph replayed": r"first decode step replayed from a CUDA graph .*",
}


def manage(*args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "manage.py", *args]
    print("$", " ".join(command[1:]), flush=True)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    print(result.stdout[-2000:] + result.stderr[-2000:], flush=True)
    if check and result.returncode != 0:
        raise SystemExit(f"FAILED: manage.py {args[0]} exited with {result.returncode}")
    return result


def wait_for_key(serve: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"FAILED: serve exited with {serve.returncode}:\n{log.read_text()}")
        key = re.search(r"Demo API key\s+(sk-\S+)", log.read_text())
        if key:
            return key.group(1)
        time.sleep(1)
    raise SystemExit(f"FAILED: serve was not up after {UP_TIMEOUT_S}s:\n{log.read_text()}")


def ask(port: int, key: str) -> list[str]:
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, timeout=60)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    started = time.perf_counter()
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=32)
    took = time.perf_counter() - started
    failures = []
    usage = reply.usage
    print(
        f"chat completion in {took * 1000:.0f} ms: finish_reason={reply.choices[0].finish_reason}"
        f", {usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens, "
        f"text {reply.choices[0].message.content[:60]!r}",
        flush=True,
    )
    if usage.completion_tokens <= 0:
        failures.append("the chat completion has no tokens")
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=32, stream=True, seed=1, temperature=0.8
        )
    )
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    print(f"stream: {len(chunks)} chunks, {len(''.join(pieces))} characters", flush=True)
    if len(chunks) < 2:
        failures.append(f"the stream gave {len(chunks)} chunks")
    return failures


def engine_log_checks(var_dir: Path) -> list[str]:
    logs = sorted((var_dir / "agent").rglob("*.log"))
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    failures = []
    for name, pattern in LOG_CHECKS.items():
        found = re.search(pattern, text)
        print(f"engine log, {name}: {found.group(0) if found else 'NOT FOUND'}", flush=True)
        if found is None:
            failures.append(f"the engine log lacks {name!r}")
    # The engine's log's last lines: what it sized and captured at start, on which device.
    print("".join(f"  {line}\n" for line in text.splitlines()[-40:]), flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, help="default: a temporary folder")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--cpu", action="store_true", help="no CUDA log checks (a dry run on a machine without one)"
    )
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="serve-check-"))
    var_dir = work / "var"
    env = {**os.environ, "PLATFORM_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1"}
    env.pop("REDIS_URL", None)  # serve starts its own
    manage("migrate", "--verbosity", "0", env=env)
    checkpoint = work / MODEL
    manage("make_demo_model", str(checkpoint), "--arch", "qwen3", "--size", "small", env=env)
    manage("load_model", str(checkpoint), "--name", MODEL, env=env)
    log = work / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(args.port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    failures = []
    try:
        key = wait_for_key(serve, log)
        print(log.read_text()[-1500:], flush=True)
        failures += ask(args.port, key)
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            failures.append("serve did not stop within 90 s of SIGINT")
    log_failures = engine_log_checks(var_dir)
    failures += [f for f in log_failures if not args.cpu or "graph" not in f]
    for failure in failures:
        print("FAILED:", failure, flush=True)
    print("serve check:", "passed" if not failures else f"{len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
