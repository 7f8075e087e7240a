"""Steady streaming load through the official openai SDK: ``workers`` concurrent streams, each
sending its next request as soon as the last one ended, until stopped. Every request's
outcome is kept, so a test can say that none failed while the fleet changed under it."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass


@dataclass
class Outcome:
    started_at: float  # time.time()
    ok: bool  # streamed to a finish_reason
    error: str = ""
    status: int | None = None  # the HTTP status of a refused request


class StreamLoad:
    def __init__(self, sdk_owner, model: str, *, workers: int = 16, max_tokens: int = 8):
        self.sdk_owner = sdk_owner  # has async_sdk() (tests/support/sdk_clients.py)
        self.model = model
        self.workers = workers
        self.max_tokens = max_tokens
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> StreamLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> list[Outcome]:
        self._stop.set()
        self._thread.join(timeout=300)
        return self.outcomes

    def wait_for(self, count: int, timeout: float = 300) -> None:
        """Until ``count`` requests have ended (the load is really flowing)."""
        deadline = time.monotonic() + timeout
        while len(self.outcomes) < count:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise AssertionError(f"only {len(self.outcomes)} requests ended: {self.failed}")
            time.sleep(0.2)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    async def _run(self) -> None:
        client = self.sdk_owner.async_sdk(timeout=180)
        async with client:
            await asyncio.gather(*(self._worker(client, i) for i in range(self.workers)))

    async def _worker(self, client, index: int) -> None:
        import openai

        while not self._stop.is_set():
            outcome = Outcome(started_at=time.time(), ok=False)
            try:
                stream = await client.completions.create(
                    model=self.model,
                    prompt=f"stream {index}: the fleet keeps serving",
                    max_tokens=self.max_tokens,
                    stream=True,
                )
                finish = None
                async for chunk in stream:
                    for choice in chunk.choices:
                        finish = choice.finish_reason or finish
                outcome.ok = finish is not None
                outcome.error = "" if outcome.ok else "the stream ended without a finish_reason"
            except openai.APIStatusError as exc:
                outcome.status, outcome.error = exc.status_code, str(exc)[:300]
            except openai.APIError as exc:  # an error event mid-stream, or the connection
                outcome.error = f"{type(exc).__name__}: {str(exc)[:300]}"
            self.outcomes.append(outcome)
