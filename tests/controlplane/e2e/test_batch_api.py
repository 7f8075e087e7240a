"""The Batch API end to end: the official SDK against Daphne, a real engine and real Celery
workers. A 1,000-line batch completes with one output line per good custom_id and the bad
lines in the error file; the batch worker runs at a lower CPU priority than live traffic; a
batch worker killed mid-batch and started again finishes it with every custom_id exactly once;
a cancel stops a batch within seconds; another tenant sees none of it; the lines' usage is
recorded under the batch."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import anthropic
import openai
import pytest

from controlplane.launcher.process_commands import (
    celery_batch_worker_command,
    celery_worker_command,
)
from tests.support.live_platform import MODEL
from tests.support.processes import autogroup_nice, nice_of, running, spawn, stop, wait_for

pytestmark = pytest.mark.slow

WORKER_ENV = {
    # A killed worker's batch is taken over within a few seconds, not half a minute.
    "BATCH_LEASE_SECONDS": "5",
    "BATCH_REQUEUE_INTERVAL": "1",
    "BATCH_MAX_IN_FLIGHT": "16",
}


def _worker_ready(log: Path) -> bool:
    return log.exists() and b"ready." in log.read_bytes()


@dataclass
class BatchPlatform:
    live: object  # LivePlatform
    keys: dict[str, str]
    env: dict[str, str]
    general_worker: object  # the worker of the platform's other tasks (and beat)
    batch_workers: list = field(default_factory=list)

    def start_batch_worker(self, log_name: str):
        log = self.live.workdir / log_name
        process = spawn(celery_batch_worker_command(loglevel="INFO"), self.env, log)
        self.batch_workers.append(process)
        wait_for(lambda: _worker_ready(log), timeout=90, what=log_name, process=process, log=log)
        return process


@pytest.fixture(scope="module")
def batch_platform(live_platform):
    db, workdir = live_platform.db, live_platform.workdir
    env = {**db.env, **WORKER_ENV}
    db.manage("create_tenant", "Batch A", "--model", MODEL)
    db.manage("create_tenant", "Batch B", "--model", MODEL)
    keys = {"a": db.create_key("Batch A"), "b": db.create_key("Batch B")}
    beat = celery_worker_command(beat_schedule=workdir / "beat-schedule", loglevel="INFO")
    log = workdir / "celery.log"
    with running(
        beat, env, log, ready=lambda: _worker_ready(log), what="celery", timeout=90
    ) as general:
        platform = BatchPlatform(live_platform, keys, env, general)
        platform.start_batch_worker("batches-1.log")
        try:
            yield platform
        finally:
            for process in platform.batch_workers:
                stop(process)


def test_a_batch_worker_started_as_serve_starts_it_yields_the_cpu(batch_platform):
    """Nice 10, and its autogroup too (Linux shares the CPU between autogroups first); the
    worker of the platform's other tasks keeps its priority."""
    log = batch_platform.live.workdir / "batches-nice.log"
    command = celery_batch_worker_command(loglevel="INFO")
    ready = lambda: _worker_ready(log)  # noqa: E731
    with running(command, batch_platform.env, log, ready=ready, what="batches", timeout=90) as w:
        # (Relative to this process's nice value, which every child starts with.)
        inherited = os.getpriority(os.PRIO_PROCESS, 0)
        assert nice_of(Path(f"/proc/{w.pid}/stat")) == max(10, inherited)
        assert autogroup_nice(w.pid) in {None, "10"}  # None: a kernel without autogroups
        assert b"yields the CPU to live traffic" in log.read_bytes()
    assert nice_of(Path(f"/proc/{batch_platform.general_worker.pid}/stat")) == inherited


def _client(platform: BatchPlatform, tenant: str) -> openai.OpenAI:
    base_url = f"{platform.live.base_url}/v1"
    return openai.OpenAI(base_url=base_url, api_key=platform.keys[tenant], max_retries=0)


def _line(custom_id: str, max_tokens: int = 2, url: str = "/v1/chat/completions") -> str:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Say something about {custom_id}"}],
        "max_tokens": max_tokens,
    }
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def _upload(client: openai.OpenAI, lines: list[str]):
    data = io.BytesIO(("\n".join(lines) + "\n").encode())
    return client.files.create(file=("input.jsonl", data), purpose="batch")


def _wait_status(client, batch_id: str, statuses: set[str], *, timeout: float, until=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses or (until is not None and until(batch)):
            return batch
        time.sleep(0.5)
    raise AssertionError(f"batch {batch_id} still {batch.status} {batch.request_counts}")


def _jsonl(client, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    # JSONL lines end at "\n" only: str.splitlines also splits at U+2028, U+0085 and other
    # separators, which JSON leaves unescaped inside a string (a random model's text has some).
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.split("\n") if line]


def test_a_1000_line_batch_completes_in_openai_format_with_bad_lines_in_the_error_file(
    batch_platform,
):
    platform = batch_platform
    client = _client(platform, "a")
    good = [_line(f"req-{i}") for i in range(997)]
    bad = ["{not json", _line("wrong-url", url="/v1/embeddings"), _line("req-5")]
    uploaded = _upload(client, good[:500] + bad + good[500:])
    assert (uploaded.object, uploaded.purpose, uploaded.filename) == (
        "file",
        "batch",
        "input.jsonl",
    )
    assert client.files.retrieve(uploaded.id).bytes == uploaded.bytes

    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "eval"},
    )
    assert (batch.object, batch.status, batch.metadata) == ("batch", "validating", {"job": "eval"})
    done = _wait_status(client, batch.id, {"completed", "failed"}, timeout=400)

    assert done.status == "completed", done
    counts = done.request_counts
    assert (counts.total, counts.completed, counts.failed) == (1000, 997, 3)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    output = _jsonl(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in output) == sorted(f"req-{i}" for i in range(997))
    for line in output:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200
        body = line["response"]["body"]
        assert body["object"] == "chat.completion" and body["model"] == MODEL
        assert body["usage"]["completion_tokens"] <= 2
    errors = _jsonl(client, done.error_file_id)
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        (None, "invalid_json_line"),
        ("wrong-url", "invalid_url"),
        ("req-5", "duplicate_custom_id"),
    ]
    assert all(e["response"] is None for e in errors)
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    with pytest.raises(openai.ConflictError):  # a completed batch cannot be cancelled
        client.batches.cancel(batch.id)

    # Usage: every line that ran is recorded under the batch (beat flushes every 5 s).
    def usage_rows() -> int:
        with sqlite3.connect(platform.live.db.path) as conn:
            query = "select count(*) from usage_usagerecord where batch_id = ?"
            return conn.execute(query, (batch.id,)).fetchone()[0]

    wait_for(lambda: usage_rows() == 997, timeout=30, what="usage of the batch's lines")

    # Tenant B sees none of it: 404 for A's ids, as for ids that do not exist.
    other = _client(platform, "b")
    assert other.files.list().data == [] and other.batches.list().data == []
    for call in (
        lambda: other.files.retrieve(uploaded.id),
        lambda: other.files.content(done.output_file_id),
        lambda: other.files.delete(uploaded.id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert [b.id for b in client.batches.list().data][:1] == [batch.id]


def test_a_cancel_stops_a_running_batch_within_seconds(batch_platform):
    client = _client(batch_platform, "a")
    # Far more work than the cancel needs to land: 400 lines were all done within the second
    # between the first progress seen and the cancel once validation got cheaper (2026-11-26).
    lines = 2000
    uploaded = _upload(client, [_line(f"c-{i}", max_tokens=16) for i in range(lines)])
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    _wait_status(
        client, batch.id, {"completed"}, timeout=120, until=lambda b: b.request_counts.completed
    )
    asked = time.monotonic()
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    done = _wait_status(client, batch.id, {"cancelled"}, timeout=15)
    assert time.monotonic() - asked < 10
    assert done.cancelled_at and 0 < done.request_counts.completed < lines
    finished = _jsonl(client, done.output_file_id)
    assert len(finished) == done.request_counts.completed
    assert all(line["response"]["status_code"] == 200 for line in finished)


def test_a_batch_worker_killed_mid_batch_is_resumed_with_every_custom_id_once(batch_platform):
    client = _client(batch_platform, "a")
    # Enough work that a quiet machine is still running the batch when the worker dies (300
    # two-token lines were all done before the first poll saw 40 of them; 600 eight-token lines
    # took about 2 s once validation got cheaper, 2026-11-26).
    ids = [f"k-{i}" for i in range(1500)]
    uploaded = _upload(client, [_line(i, max_tokens=8) for i in ids])
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    _wait_status(
        client,
        batch.id,
        {"completed"},
        timeout=120,
        until=lambda b: b.request_counts.completed >= 10,
    )
    for worker in batch_platform.batch_workers:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    # Restart the worker before asserting anything: later tests need one either way.
    batch_platform.start_batch_worker("batches-2.log")
    partial = client.batches.retrieve(batch.id)
    assert partial.status == "in_progress" and partial.request_counts.completed < len(ids), partial

    done = _wait_status(client, batch.id, {"completed", "failed"}, timeout=300)
    assert done.status == "completed" and done.request_counts.completed == len(ids)
    output = _jsonl(client, done.output_file_id)
    assert sorted(line["custom_id"] for line in output) == sorted(ids)  # each exactly once
    assert done.error_file_id is None


def test_batch_lines_spend_the_tenants_token_budget_and_stop_when_it_is_gone(batch_platform):
    db = batch_platform.live.db
    db.manage("create_tenant", "Batch budget", "--model", MODEL, "--monthly-budget", "150")
    batch_platform.keys["budget"] = db.create_key("Batch budget")
    client = _client(batch_platform, "budget")
    uploaded = _upload(client, [_line(f"b-{i}") for i in range(30)])
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = _wait_status(client, batch.id, {"completed", "failed"}, timeout=120)
    assert done.status == "completed"
    ran, refused = _jsonl(client, done.output_file_id), _jsonl(client, done.error_file_id)
    assert ran and refused and len(ran) + len(refused) == 30
    used = sum(line["response"]["body"]["usage"]["total_tokens"] for line in ran)
    assert used <= 150
    for line in refused:
        assert line["response"]["status_code"] == 429
        assert line["response"]["body"]["error"]["code"] == "insufficient_quota"


def test_a_file_over_the_json_body_cap_uploads_downloads_byte_for_byte_and_deletes(
    batch_platform,
):
    client = _client(batch_platform, "a")
    lines = [_line(f"big-{i}", max_tokens=1) for i in range(30_000)]  # about 6 MB, over 4 MiB
    content = ("\n".join(lines) + "\n").encode()
    uploaded = client.files.create(file=("big.jsonl", io.BytesIO(content)), purpose="batch")
    assert uploaded.bytes == len(content) > 4 * 1024 * 1024
    assert client.files.content(uploaded.id).content == content
    assert uploaded.id in [f.id for f in client.files.list(purpose="batch").data]
    deleted = client.files.delete(uploaded.id)
    assert deleted.deleted and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_a_responses_batch_answers_response_objects_and_stores_them(batch_platform):
    client = _client(batch_platform, "a")

    def line(custom_id: str, **fields) -> str:
        body = {"model": MODEL, "input": f"About {custom_id}", "max_output_tokens": 3, **fields}
        return json.dumps(
            {"custom_id": custom_id, "method": "POST", "url": "/v1/responses", "body": body}
        )

    lines = [
        line("kept"),
        line("unstored", store=False),
        line("bad", max_output_tokens=0),
        line("background", background=True),
    ]
    batch = client.batches.create(
        input_file_id=_upload(client, lines).id, endpoint="/v1/responses", completion_window="24h"
    )
    done = _wait_status(client, batch.id, {"completed", "failed"}, timeout=120)
    assert done.status == "completed" and done.request_counts.failed == 2, done
    bodies = {o["custom_id"]: o["response"]["body"] for o in _jsonl(client, done.output_file_id)}
    assert {b["object"] for b in bodies.values()} == {"response"}
    assert (
        client.responses.retrieve(bodies["kept"]["id"]).output_text
        == (bodies["kept"]["output"][0]["content"][0]["text"])
    )
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(bodies["unstored"]["id"])
    errors = {e["custom_id"]: e["response"] for e in _jsonl(client, done.error_file_id)}
    assert {name: error["status_code"] for name, error in errors.items()} == {
        "bad": 400,
        "background": 400,
    }
    assert errors["background"]["body"]["error"]["param"] == "background"


def test_chat_lines_with_store_are_kept_as_stored_completions(batch_platform):
    client = _client(batch_platform, "a")
    kept = json.loads(_line("kept"))
    kept["body"] |= {"store": True, "metadata": {"source": "batch-store-test"}}
    lines = [json.dumps(kept), _line("plain")]
    batch = client.batches.create(
        input_file_id=_upload(client, lines).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    done = _wait_status(client, batch.id, {"completed", "failed"}, timeout=120)
    assert done.status == "completed" and done.request_counts.completed == 2, done
    bodies = {o["custom_id"]: o["response"]["body"] for o in _jsonl(client, done.output_file_id)}
    [stored] = client.chat.completions.list(metadata={"source": "batch-store-test"}).data
    assert stored.id == bodies["kept"]["id"]
    assert stored.choices[0].message.content == bodies["kept"]["choices"][0]["message"]["content"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(bodies["plain"]["id"])


def _anthropic(platform: BatchPlatform, tenant: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=platform.live.base_url, api_key=platform.keys[tenant], max_retries=0
    )


def _params(text: str, max_tokens: int = 3) -> dict:
    return {
        "model": MODEL,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    }


def _wait_ended(client: anthropic.Anthropic, batch_id: str, *, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.5)
    raise AssertionError(f"{batch_id} still {batch.processing_status} {batch.request_counts}")


def test_a_message_batch_through_anthropics_sdk_ends_with_a_result_per_request(batch_platform):
    client = _anthropic(batch_platform, "a")
    created = client.messages.batches.create(
        requests=[
            {"custom_id": "hello", "params": _params("Hello")},
            {"custom_id": "lists", "params": _params("Tell me about lists.", max_tokens=5)},
            {
                "custom_id": "prefill",
                "params": {
                    **_params("Hi"),
                    "messages": [
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hel"},
                    ],
                },
            },  # assistant prefill: refused by /v1/messages, so errored here
        ]
    )
    assert created.id.startswith("msgbatch_") and created.processing_status == "in_progress"
    assert created.request_counts.processing == 3 and created.results_url is None

    ended = _wait_ended(client, created.id, timeout=120)
    counts = ended.request_counts
    assert (counts.processing, counts.succeeded, counts.errored) == (0, 2, 1)
    assert ended.ended_at and ended.results_url.endswith(f"/v1/messages/batches/{ended.id}/results")
    results = {r.custom_id: r.result for r in client.messages.batches.results(ended.id)}
    assert results["hello"].type == "succeeded"
    assert (
        results["hello"].message.type == "message" and results["hello"].message.role == "assistant"
    )
    assert results["lists"].message.usage.output_tokens <= 5
    assert results["prefill"].type == "errored"
    assert results["prefill"].error.error.type == "invalid_request_error"
    assert "last message" in results["prefill"].error.error.message

    # Listed apart from the Batch API's batches; another tenant sees none of it.
    assert [b.id for b in client.messages.batches.list(limit=1)][:1] == [ended.id]
    assert ended.id not in {b.id for b in _client(batch_platform, "a").batches.list().data}
    with pytest.raises(anthropic.NotFoundError):
        _anthropic(batch_platform, "b").messages.batches.retrieve(ended.id)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.create(requests=[{"custom_id": "same", "params": _params("a")}] * 2)

    client.messages.batches.delete(ended.id)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(ended.id)


def test_a_cancelled_message_batch_reports_its_unrun_requests_as_canceled(batch_platform):
    client = _anthropic(batch_platform, "a")
    requests = [{"custom_id": f"c-{i}", "params": _params(f"Count {i}", 16)} for i in range(1500)]
    created = client.messages.batches.create(requests=requests)
    deadline = time.monotonic() + 120
    while client.messages.batches.retrieve(created.id).request_counts.succeeded == 0:
        assert time.monotonic() < deadline, "no request of the batch ran"
        time.sleep(0.3)
    with pytest.raises(anthropic.APIStatusError) as running:
        client.messages.batches.delete(created.id)  # not before it has ended
    assert running.value.status_code == 409
    canceling = client.messages.batches.cancel(created.id)
    assert canceling.processing_status in ("canceling", "ended") and canceling.cancel_initiated_at

    ended = _wait_ended(client, created.id, timeout=30)
    counts = ended.request_counts
    assert counts.canceled > 0 and counts.succeeded + counts.canceled + counts.errored == 1500
    kinds: dict[str, int] = {}
    for result in client.messages.batches.results(ended.id):
        kinds[result.result.type] = kinds.get(result.result.type, 0) + 1
    assert kinds == {
        k: v
        for k, v in {
            "succeeded": counts.succeeded,
            "canceled": counts.canceled,
            "errored": counts.errored,
        }.items()
        if v
    }
