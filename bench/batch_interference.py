"""Interactive time to first token while a 1,000-line batch runs (issue 17, acceptance 3).

Starts a private Redis, a migrated SQLite database with a tenant and key, one engine process
(CPU, a tiny random-weight llama, ``--policy``: fair by default, where batch lines are a class
below interactive requests), Daphne and the Batch API's Celery worker. Sends N streaming chat requests one after another with the official openai SDK
and takes their TTFT p50 with nothing else running ("idle"); then uploads a 1,000-line JSONL
file, creates a batch, waits until its lines are running, and sends the same N requests while
it runs; once the batch has ended, N more idle (the spread of the two idle figures is the
machine's own noise). Prints JSON, and last the ratio loaded p50 / idle p50 (acceptance: at
most 1.5).

    .venv/bin/python bench/batch_interference.py --requests 40 --batch-lines 1000
    .venv/bin/python bench/batch_interference.py --batch-lines 4000 --batch-max-tokens 32
"""

from __future__ import annotations

import argparse
import io
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

from controlplane.launcher.stack import wait_until  # noqa: E402


def _wait(check, timeout: float, what: str) -> None:
    """Until ``check()`` holds (the batch's progress; the launcher waits for start-up)."""
    wait_until(check, timeout=timeout, what=what)


def ttft(client, index: int, max_tokens: int) -> float:
    started = time.monotonic()
    stream = client.chat.completions.create(
        model="bench",
        messages=[{"role": "user", "content": f"Interactive question {index}: tell me a story."}],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    first = None
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.monotonic() - started
    return first if first is not None else float("nan")


def interactive_ttfts(client, count: int, max_tokens: int) -> list[float]:
    values = []
    for i in range(count):
        values.append(ttft(client, i, max_tokens))
        time.sleep(0.1)  # a person's pace, not a benchmark's flood
    return values


def batch_input(lines: int, max_tokens: int) -> io.BytesIO:
    out = io.BytesIO()
    for i in range(lines):
        body = {
            "model": "bench",
            "messages": [{"role": "user", "content": f"Batch item {i}: summarise the news."}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        line = {"custom_id": f"item-{i}", "method": "POST", "url": "/v1/chat/completions"}
        out.write(json.dumps({**line, "body": body}).encode() + b"\n")
    out.seek(0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40, help="interactive requests a phase")
    parser.add_argument("--max-tokens", type=int, default=8, help="of each interactive request")
    parser.add_argument("--batch-lines", type=int, default=1000)
    parser.add_argument("--batch-max-tokens", type=int, default=16)
    parser.add_argument(
        "--in-flight",
        type=int,
        default=256,
        help="BATCH_MAX_IN_FLIGHT (default 256, the platform's: enough to fill the engine's "
        "batch; the engine alone keeps interactive requests first)",
    )
    parser.add_argument(
        "--policy",
        default="fair",
        choices=("fair", "priority", "fcfs"),
        help="the engine's --scheduling-policy (default fair, what the platform runs: batch "
        "lines are a class below interactive requests)",
    )
    parser.add_argument(
        "--fixed-engine-threads",
        action="store_true",
        help="the engine's --fixed-cpu-threads: every step on all its threads, even while the "
        "API and the batch worker use the cores (default: fewer then)",
    )
    parser.add_argument(
        "--cancel-after-measuring",
        action="store_true",
        help="cancel the batch once the loaded phase is measured instead of waiting for it",
    )
    args = parser.parse_args()

    import openai

    from bench.served_platform import served_platform
    from controlplane.launcher.process_commands import celery_batch_worker_command
    from engine.tooling.demo.checkpoint import make_checkpoint

    work = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    checkpoint = make_checkpoint(work / "model", arch="llama", size="tiny")
    with served_platform(
        work,
        checkpoint,
        env={"BATCH_MAX_IN_FLIGHT": str(args.in_flight)},
        engine_options={
            "scheduling_policy": args.policy,
            "fixed_cpu_threads": args.fixed_engine_threads,
        },
        extra_children={"batches": celery_batch_worker_command(loglevel="WARNING")},
    ) as served:
        base_url, key = served.base_url, served.key
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=600)
        interactive_ttfts(client, 3, args.max_tokens)  # warm-up: imports, tokenizer
        load_before = os.getloadavg()[0]
        idle = interactive_ttfts(client, args.requests, args.max_tokens)

        uploaded = client.files.create(
            file=("batch.jsonl", batch_input(args.batch_lines, args.batch_max_tokens)),
            purpose="batch",
        )
        batch_started = time.monotonic()
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        _wait(lambda: client.batches.retrieve(batch.id).request_counts.completed > 0, 120, "batch")
        loaded = interactive_ttfts(client, args.requests, args.max_tokens)
        during = client.batches.retrieve(batch.id)
        load_during = os.getloadavg()[0]
        if args.cancel_after_measuring:
            client.batches.cancel(batch.id)
        ended = ("completed", "cancelled")
        _wait(lambda: client.batches.retrieve(batch.id).status in ended, 1800, "batch end")
        batch_wall = time.monotonic() - batch_started
        final = client.batches.retrieve(batch.id)
        # Idle again: how far the machine's own noise moves the figure (A-B-A).
        idle_after = interactive_ttfts(client, args.requests, args.max_tokens)

        idle_p50, loaded_p50 = statistics.median(idle), statistics.median(loaded)
        result = {
            "interactive_requests_per_phase": args.requests,
            "interactive_max_tokens": args.max_tokens,
            "batch_lines": args.batch_lines,
            "batch_max_tokens": args.batch_max_tokens,
            "batch_max_in_flight": args.in_flight,
            "scheduling_policy": args.policy,
            "idle_ttft_p50_s": round(idle_p50, 4),
            "idle_ttft_p90_s": round(sorted(idle)[int(0.9 * len(idle))], 4),
            "idle_after_ttft_p50_s": round(statistics.median(idle_after), 4),
            "loaded_ttft_p50_s": round(loaded_p50, 4),
            "loaded_ttft_p90_s": round(sorted(loaded)[int(0.9 * len(loaded))], 4),
            "batch_lines_done_when_loaded_phase_ended": during.request_counts.completed,
            "batch_status_when_loaded_phase_ended": during.status,
            "batch_wall_s": round(batch_wall, 1),
            "batch_status": final.status,
            "batch_completed": final.request_counts.completed,
            "batch_failed": final.request_counts.failed,
            "load_average_1m_before_after": [round(load_before, 1), round(load_during, 1)],
            "machine": f"{pyplatform.machine()}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        print(json.dumps(result, indent=2))
        print(f"ttft_p50_ratio_loaded_over_idle {loaded_p50 / idle_p50:.2f}")


if __name__ == "__main__":
    main()
