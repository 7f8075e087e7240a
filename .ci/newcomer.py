"""The newcomer's path, as CI runs it before the test suite.

A fresh clone of this checkout, `bin/serve` there with nothing prepared (it creates a
runtime-only .venv: no test group), /health, the README's question through plain HTTP with
the demo key serve prints, then Ctrl-C (SIGINT) and a check that no process of it is left.
A dependency that only the test group brings fails here, before any test can hide it.

    python3 .ci/newcomer.py [--workdir DIR] [--keep] [--without PACKAGE]

`--without PACKAGE` drops a runtime dependency from the clone's pyproject.toml first: the
deliberate run that shows this check fails when one is missing. Standard library only: it
runs before any virtualenv exists. Exit status 0 when the whole path held.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTION = "What is the capital of France?"
CHAT_MODEL = "smollm2-135m-instruct"
# A first run installs torch and the rest (1-3 minutes), builds the CPU kernels and converts
# the demo model; a slow mirror or a loaded machine can take several times that.
UP_TIMEOUT_S = 20 * 60
STOP_TIMEOUT_S = 90


def say(message: str) -> None:
    print(f"[newcomer] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fresh_clone(workdir: Path, without: str | None) -> Path:
    clone = workdir / "platform"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    if without:
        drop_dependency(clone / "pyproject.toml", without)
    return clone


def drop_dependency(pyproject: Path, package: str) -> None:
    """Remove ``package`` from [project] dependencies (the line that names it)."""
    pattern = re.compile(rf'^\s*"{re.escape(package)}\s*[<>=!~\[;"]', re.IGNORECASE)
    lines = pyproject.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not pattern.match(line)]
    if len(kept) == len(lines):
        raise SystemExit(f"{package} is not a dependency in {pyproject}")
    pyproject.write_text("".join(kept))
    say(f"dropped {package} from the clone's runtime dependencies (a deliberate failure)")


class Serve:
    """``bin/serve`` in its own session, its output echoed and kept."""

    def __init__(self, clone: Path, port: int, log: Path):
        self.log_path = log
        self._log = log.open("w")
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            ["bin/serve", "--port", str(port)],
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in a terminal reaches the whole group; so here
        )
        self._echoed = 0

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def echo_new_output(self) -> None:
        text = self.output()
        for line in text[self._echoed :].splitlines():
            print(f"    | {line}", flush=True)
        self._echoed = len(text)

    def interrupt(self) -> int | None:
        """SIGINT to serve's process group, as Ctrl-C sends; its exit status, or None."""
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None


def wait_until_up(serve: Serve, base_url: str) -> str:
    """Until /health answers 200 and serve printed its banner: the demo API key."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        serve.echo_new_output()
        if serve.process.poll() is not None:
            raise Failure(f"bin/serve exited with {serve.process.returncode} before it was up")
        key = re.search(r"Demo API key\s+(sk-\S+)", serve.output())
        if key and health(base_url) == 200:
            return key.group(1)
        time.sleep(1)
    raise Failure(f"bin/serve was not up after {UP_TIMEOUT_S}s")


def health(base_url: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=5) as response:
            return response.status
    except (OSError, urllib.error.URLError):
        return None


def ask_the_readme_question(base_url: str, api_key: str) -> str:
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 64,
        "temperature": 0,
    }
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.load(response)
    except urllib.error.HTTPError as exc:
        raise Failure(f"the chat request failed: {exc.code} {exc.read()[:500]!r}") from exc
    return reply["choices"][0]["message"]["content"]


def processes_left(serve: Serve, clone: Path) -> list[str]:
    """Processes of serve's session, or running from the clone (a daemon that left the
    session still has the clone in its command line or working directory)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            cwd = os.readlink(entry / "cwd")
            session = os.getsid(int(entry.name))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ProcessLookupError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if state == "Z":
            continue  # exited; only its parent's wait is missing
        ours = session == serve.process.pid or str(clone) in cmdline
        if ours or cwd == str(clone) or cwd.startswith(f"{clone}/"):
            left.append(f"{entry.name}: {cmdline[:200]}")
    return left


class Failure(Exception):
    pass


def run(workdir: Path, without: str | None) -> None:
    started = time.monotonic()
    clone = fresh_clone(workdir, without)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    say(f"bin/serve --port {port} in a fresh clone, {clone}")
    serve = Serve(clone, port, workdir / "serve.log")
    try:
        api_key = wait_until_up(serve, base_url)
        say(f"up after {time.monotonic() - started:.0f}s; asking: {QUESTION}")
        answer = ask_the_readme_question(base_url, api_key)
        say(f"answer: {answer!r}")
        if "paris" not in answer.lower():
            raise Failure("the answer does not name Paris")
    finally:
        if serve.process.poll() is None:
            say("stopping it with SIGINT (Ctrl-C)")
            status = serve.interrupt()
            serve.echo_new_output()
            if status is None:
                os.killpg(serve.process.pid, signal.SIGKILL)
                raise Failure(f"bin/serve did not stop within {STOP_TIMEOUT_S}s of SIGINT")
            say(f"bin/serve exited with {status}")
        else:
            serve.echo_new_output()
        left = processes_left(serve, clone)
        if left:
            raise Failure("processes left after bin/serve stopped:\n  " + "\n  ".join(left))
    say(f"the newcomer's path holds ({time.monotonic() - started:.0f}s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="where to clone (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the clone afterwards")
    parser.add_argument("--without", metavar="PACKAGE", help="drop a runtime dependency first")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="newcomer-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        run(workdir.resolve(), args.without)
    except Failure as exc:
        print(f"[newcomer] FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(workdir / "platform", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
