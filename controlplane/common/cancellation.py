"""A cancellation that redis-py dropped, honoured where it matters.

redis-py's asyncio connections send each command under ``asyncio.wait_for`` (the socket
timeout, 5 s by default). On Python 3.11 ``wait_for`` returns the result when a cancellation
arrives just as the result does, and the cancellation is lost: about one command in ten
cancelled mid-flight (a client that disconnects while its request is being admitted or sent)
carries on as if nothing happened (measured against a local Redis, 2026-11-28). The task
still counts the request (``Task.cancelling()``), so code about to wait a long time (for an
engine's output, for a place in line) asks here first and ends as it was told to.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelled() -> None:
    """Raise CancelledError if this task was asked to cancel and that request was swallowed."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
