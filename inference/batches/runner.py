"""Running one batch: claim it, feed its lines to the use cases with a bounded number in flight,
write each result once, and finish it (completed, cancelled or expired).

Progress is durable line by line: results reach the database every second, keyed by line
number, and a resumed run skips the lines already written. So a worker killed mid-batch loses
at most a second of work, and no line appears twice in the output. The run holds a lease it
renews every second; a dead worker's lease runs out and beat sends the batch again. Every
renewal also reads the batch's status, so a cancel is seen within a second: the lines in flight
are cancelled (which aborts their engine requests) and the finished ones are written out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from controlplane.access.principals import Principal, stored_key_principal
from controlplane.batches import selectors, services
from controlplane.batches.input_lines import InputLine, LineError
from controlplane.batches.models import Batch
from controlplane.batches.result_lines import error_line, response_line
from controlplane.common.api_error import ApiError
from controlplane.common.outages import DATA_OUTAGE_ERRORS
from inference.batches.input_reader import count_lines, input_lines
from inference.batches.line_requests import LineAnswer, answer_line

logger = logging.getLogger(__name__)
Status = Batch.Status

POLL_SECONDS = 1.0  # lease renewal, result writes, cancel and expiry checks
# A line refused for a passing reason (rate limit, engine busy) is tried again this long.
LINE_RETRY_SECONDS = 600.0


class BatchRun:
    """One worker's run of one batch (``await BatchRun(batch_id).run()``)."""

    def __init__(self, batch_id: str):
        self.batch_id = batch_id
        self.owner = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.results: list[tuple[int, bool, str]] = []  # finished lines not yet written
        self.stop_reason: str | None = None  # "cancelled", "expired" or "lost"
        self.stopped = asyncio.Event()
        self.principal: Principal | ApiError | None = None

    async def run(self) -> str:
        """What became of the batch: a final status, "lost", or "not claimed"."""
        batch = await sync_to_async(services.batch_claim)(batch_id=self.batch_id, owner=self.owner)
        if batch is None:
            return "not claimed"  # finished, or a live worker runs it
        try:
            return await self._run(batch)
        except DATA_OUTAGE_ERRORS:
            raise  # the database or Redis is away: sent again once the lease runs out
        except Exception as exc:
            # A fault of this batch or of the code: counted, so that a batch that fails the
            # same way every run is failed, not sent again every lease forever.
            logger.exception("batch %s: the run stopped on an unexpected error", self.batch_id)
            failed = await sync_to_async(services.batch_crashed)(
                batch_id=self.batch_id, owner=self.owner, error=type(exc).__name__
            )
            if failed:
                return Status.FAILED
            raise

    async def _run(self, batch: Batch) -> str:
        logger.info("batch %s: running as %s (status %s)", batch.id, self.owner, batch.status)
        if batch.status == Status.CANCELLING:
            return await self._finish(Status.CANCELLED)
        if batch.status == Status.FINALIZING:
            return await self._finish(Status.COMPLETED)
        if batch.status == Status.VALIDATING and not await self._validate(batch):
            return Status.FAILED
        await self._refresh_principal(batch)
        monitor = asyncio.create_task(self._monitor(batch))
        try:
            await self._feed(batch)
        except OSError as exc:  # the input file went missing from storage mid-run
            await self._fail("input_file_unavailable", f"The input file cannot be read: {exc}.")
            return Status.FAILED
        finally:
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
            await self._flush()
        if self.stop_reason == "lost":
            return "lost"
        if self.stop_reason == Status.EXPIRED:
            await self._expire_rest(batch)
        return await self._finish(self.stop_reason or Status.COMPLETED)

    # Phases ----------------------------------------------------------------------------------

    async def _validate(self, batch: Batch) -> bool:
        try:
            total = await sync_to_async(count_lines)(batch)
        except OSError as exc:
            await self._fail("input_file_unavailable", f"The input file cannot be read: {exc}.")
            return False
        if total == 0:
            await self._fail("empty_file", "The input file holds no requests.")
            return False
        if total > settings.BATCH_MAX_LINES:
            await self._fail(
                "too_many_requests",
                f"The input file holds {total} requests; a batch may hold "
                f"{settings.BATCH_MAX_LINES}.",
            )
            return False
        await sync_to_async(services.batch_start)(batch_id=batch.id, owner=self.owner, total=total)
        return True

    async def _feed(self, batch: Batch) -> None:
        """Start a task per line, at most ``in flight`` at once, until every line has run."""
        done = await sync_to_async(selectors.batch_done_lines)(batch_id=batch.id)
        limit = self._in_flight_limit()
        running: set[asyncio.Task] = set()
        stop = asyncio.create_task(self.stopped.wait())
        try:
            async for item in input_lines(batch):
                if self.stopped.is_set():
                    break
                if item.line in done:
                    continue
                if isinstance(item, LineError):
                    record = error_line(item.custom_id, code=item.code, message=item.message)
                    self.results.append((item.line, False, record))
                    continue
                while len(running) >= limit and not self.stopped.is_set():
                    finished, _ = await asyncio.wait(
                        running | {stop}, return_when=asyncio.FIRST_COMPLETED
                    )
                    running -= finished
                if self.stopped.is_set():
                    break
                running.add(asyncio.create_task(self._line(batch, item)))
            while running and not self.stopped.is_set():
                finished, _ = await asyncio.wait(
                    running | {stop}, return_when=asyncio.FIRST_COMPLETED
                )
                running -= finished
        finally:
            for task in running | {stop}:
                task.cancel()  # a cancelled line aborts its engine request; it is not written
            await asyncio.gather(*running, stop, return_exceptions=True)

    async def _line(self, batch: Batch, item: InputLine) -> None:
        deadline = time.monotonic() + LINE_RETRY_SECONDS
        while True:
            answer = await self._answer(batch, item)
            if answer.retry_after is None or time.monotonic() + answer.retry_after > deadline:
                break
            await asyncio.sleep(min(answer.retry_after, 30.0))
        record = response_line(
            item.custom_id,
            status_code=answer.status_code,
            request_id=answer.request_id,
            body=answer.body,
        )
        self.results.append((item.line, answer.ok, record))

    async def _answer(self, batch: Batch, item: InputLine) -> LineAnswer:
        if isinstance(self.principal, ApiError):
            error = self.principal
            return LineAnswer(error.status, f"req_{secrets.token_hex(12)}", error.body())
        return await answer_line(batch.endpoint, self.principal, item.body, batch_id=batch.id)

    async def _monitor(self, batch: Batch) -> None:
        ticks = 0
        while not self.stopped.is_set():
            await asyncio.sleep(POLL_SECONDS)
            ticks += 1
            await self._flush()
            current = await sync_to_async(services.batch_renew)(batch_id=batch.id, owner=self.owner)
            if current is None:
                self._stop("lost")
            elif current.status == Status.CANCELLING:
                self._stop(Status.CANCELLED)
            elif timezone.now() >= current.expires_at:
                self._stop(Status.EXPIRED)
            elif ticks % 5 == 0:  # a key revoked meanwhile stops the lines not yet run
                await self._refresh_principal(batch)

    async def _expire_rest(self, batch: Batch) -> None:
        done = await sync_to_async(selectors.batch_done_lines)(batch_id=batch.id)
        async for item in input_lines(batch):
            if item.line not in done:
                record = error_line(
                    item.custom_id,
                    code="batch_expired",
                    message="This request could not be executed before the completion window "
                    "expired.",
                )
                self.results.append((item.line, False, record))
        await self._flush()

    async def _finish(self, status: str) -> str:
        await sync_to_async(services.batch_finish)(
            batch_id=self.batch_id, owner=self.owner, status=status
        )
        logger.info("batch %s: %s", self.batch_id, status)
        return status

    async def _fail(self, code: str, message: str) -> None:
        await sync_to_async(services.batch_fail)(
            batch_id=self.batch_id, owner=self.owner, code=code, message=message
        )

    # Helpers ---------------------------------------------------------------------------------

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stopped.set()

    def _in_flight_limit(self) -> int:
        limit = settings.BATCH_MAX_IN_FLIGHT
        if isinstance(self.principal, Principal):
            concurrent = self.principal.limits.max_concurrent_requests
            if concurrent:  # more would only be refused with 429 and waited out
                limit = min(limit, concurrent)
        return max(1, limit)

    async def _refresh_principal(self, batch: Batch) -> None:
        record = await sync_to_async(selectors.batch_key_record)(batch_id=batch.id)
        try:
            self.principal = stored_key_principal(record, endpoint=batch.endpoint)
        except ApiError as exc:
            self.principal = exc

    async def _flush(self) -> None:
        if not self.results:
            return
        results, self.results = self.results, []
        try:
            await sync_to_async(services.batch_record_results)(
                batch_id=self.batch_id, results=results
            )
        except asyncio.CancelledError:
            # The run cancels its monitor once the last line has run, maybe while the
            # monitor's write still waits for the database thread: that write is then dropped,
            # and the batch would complete without its lines (CI saw 24 refused lines of 30
            # missing from the error file). Kept for the run's final write; should the write
            # have run after all, sending it again changes nothing (batch_record_results keeps
            # the result a line already has).
            self.results = results + self.results
            raise
        except Exception:
            logger.exception("batch %s: could not write results; trying again", self.batch_id)
            self.results = results + self.results
