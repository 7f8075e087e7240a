"""bench/spec_decode.py's comparison with llama.cpp's own n-gram speculation: the same prompts
(token ids) through llama-cpp-python with and without its prompt-lookup decoding
(``LlamaPromptLookupDecoding``), in its own virtualenv (bench/spec_llamacpp_worker.py), on the
GGUF file the demo checkpoint is converted from."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from bench import peers

WORKER = peers.REPO / "bench" / "spec_llamacpp_worker.py"


def llamacpp_prompt_lookup(prompts: list[list[int]], tokens: list[int], threads: int) -> dict:
    """tokens/s of llama.cpp plain and with prompt lookup over ``prompts``, ``tokens[i]`` tokens
    for prompt i (all tokens over all requests' time, as bench/spec_decode.py counts ours), and
    how many greedy outputs differ between the two. Builds llama-cpp-python the first time
    (bench/peers.py)."""
    from bench.cpu_vs_llamacpp import smollm2_gguf

    python = peers.ensure_llamacpp()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work.json"
        work.write_text(json.dumps({"prompts": prompts, "tokens": tokens}))
        command = [str(python), str(WORKER), "--model", str(smollm2_gguf()), "--work", str(work)]
        command += ["--threads", str(threads)]
        done = subprocess.run(command, cwd=peers.REPO, capture_output=True, text=True, timeout=7200)
    for line in done.stdout.splitlines():
        if line.startswith("@@result "):
            rows = json.loads(line[len("@@result ") :])
            break
    else:
        raise SystemExit(f"llama.cpp's side failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")

    def rate(side: str) -> float:
        produced = sum(len(row[side]["tokens"]) for row in rows)
        return produced / sum(row[side]["seconds"] for row in rows)

    differ = sum(row["plain"]["tokens"] != row["lookup"]["tokens"] for row in rows)
    return {"plain": rate("plain"), "lookup": rate("lookup"), "differ": differ, "n": len(rows)}
