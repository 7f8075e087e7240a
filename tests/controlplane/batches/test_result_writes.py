"""A batch run's result writes (inference/batches/runner.py): a write cancelled while it waits
for the database thread loses no line. CI saw a 30-line batch complete with its 24 refused
lines missing from the error file: the run cancels its monitor once the last line has run, and
the monitor's write of those lines was still queued behind other database work, so asgiref
dropped it."""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async

from inference.batches import runner


def test_a_write_cancelled_while_it_waits_for_the_database_thread_loses_no_line(monkeypatch):
    written: dict[int, str] = {}

    def record_results(*, batch_id: str, results: list[tuple[int, bool, str]]) -> None:
        for line, _ok, record in results:  # as the database does: a line is written once
            written.setdefault(line, record)

    monkeypatch.setattr(runner.services, "batch_record_results", record_results)

    async def scenario() -> None:
        run = runner.BatchRun("batch_test")
        run.results = [(2, False, "refused"), (3, False, "refused")]
        busy = threading.Event()
        # Other database work holds the one thread sync_to_async runs it on.
        other_work = asyncio.create_task(sync_to_async(busy.wait)(5))
        await asyncio.sleep(0.05)
        monitor_write = asyncio.create_task(run._flush())
        await asyncio.sleep(0.05)
        monitor_write.cancel()  # as the run cancels its monitor when the last line has run
        busy.set()
        await asyncio.gather(other_work, monitor_write, return_exceptions=True)
        run.results.append((1, True, "ran"))
        await run._flush()  # the run's final write, before it builds the output files

    asyncio.run(scenario())  # as the batch worker's task runs a batch
    assert written == {1: "ran", 2: "refused", 3: "refused"}
