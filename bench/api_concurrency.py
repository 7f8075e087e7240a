"""Many concurrent streaming chat requests through ONE Daphne process (issue 5, acceptance 4).

Starts a private Redis, a migrated SQLite database with a tenant and key, one engine process on
a tiny random-weight llama and one Daphne; then opens N streaming /v1/chat/completions at once
with the official async openai SDK, checks every stream ends with exactly max_tokens tokens
(usage and chunk count), and reports wall time, time-to-first-token percentiles and Daphne's
memory (RSS now and peak) and CPU time.

    .venv/bin/python bench/api_concurrency.py --concurrency 200 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform as pyplatform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) // 1024  # MiB
    return fields


async def one_stream(client, index: int, max_tokens: int, started: float) -> dict:
    first = None
    content_chunks = 0
    usage = None
    stream = await client.chat.completions.create(
        model="bench",
        messages=[{"role": "user", "content": f"Request number {index}: tell me a story."}],
        max_tokens=max_tokens,
        temperature=0.8,
        seed=index,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                content_chunks += 1
                if first is None:
                    first = time.monotonic() - started
    return {
        "ttft": first,
        "completion_tokens": usage.completion_tokens if usage else None,
        "content_chunks": content_chunks,
        "end": time.monotonic() - started,
    }


async def run_load(base_url: str, key: str, concurrency: int, max_tokens: int) -> dict:
    import httpx
    import openai

    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency)
    client = openai.AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key=key,
        max_retries=0,
        timeout=600,
        http_client=httpx.AsyncClient(limits=limits, timeout=600),
    )
    started = time.monotonic()
    results = await asyncio.gather(
        *(one_stream(client, i, max_tokens, started) for i in range(concurrency)),
        return_exceptions=True,
    )
    wall = time.monotonic() - started
    await client.close()
    failures = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    right = [r for r in ok if r["completion_tokens"] == max_tokens]
    ttfts = sorted(r["ttft"] for r in ok if r["ttft"] is not None)

    def pct(p: float) -> float:
        return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else float("nan")

    return {
        "requests": concurrency,
        "completed_with_right_token_count": len(right),
        "failures": [repr(f)[:200] for f in failures[:5]],
        "num_failures": len(failures),
        "wall_s": round(wall, 2),
        "ttft_p50_s": round(pct(0.5), 3),
        "ttft_p90_s": round(pct(0.9), 3),
        "ttft_p99_s": round(pct(0.99), 3),
        "median_end_s": round(statistics.median(r["end"] for r in ok), 2) if ok else None,
        "output_tokens_per_s": round(sum(r["completion_tokens"] or 0 for r in ok) / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--redis-max-connections", type=int, default=100)
    args = parser.parse_args()

    from bench.peers import cpu_seconds
    from bench.served_platform import served_platform
    from engine.tooling.demo.checkpoint import make_checkpoint

    work = Path(tempfile.mkdtemp(prefix="api-bench-"))
    checkpoint = make_checkpoint(work / "model", arch=args.arch, size="tiny")
    with served_platform(
        work,
        checkpoint,
        engine_options={"max_num_seqs": max(256, args.concurrency)},
        # redis-py's asyncio pools hold at most 100 connections and raise past that; the URL
        # raises the cap for every client in the API process (see docs/benchmarks.md).
        api_redis_query=f"max_connections={args.redis_max_connections}",
        ready_timeout=120,
    ) as served:
        base_url, key, daphne = served.base_url, served.key, served.daphne.process
        # One request first, so that imports and tokenizer loading are not in the figures.
        asyncio.run(run_load(base_url, key, 1, 4))
        idle = _proc_status(daphne.pid)
        cpu_before = cpu_seconds(daphne.pid)
        result = asyncio.run(run_load(base_url, key, args.concurrency, args.max_tokens))
        result["daphne_cpu_s"] = round(cpu_seconds(daphne.pid) - cpu_before, 2)
        after = _proc_status(daphne.pid)
        result["daphne_rss_idle_mib"] = idle.get("VmRSS")
        result["daphne_rss_after_mib"] = after.get("VmRSS")
        result["daphne_rss_peak_mib"] = after.get("VmHWM")
        result["max_tokens"] = args.max_tokens
        result["machine"] = f"{pyplatform.machine()}, {os.cpu_count()} CPUs"
        result["date"] = time.strftime("%Y-%m-%d")
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
