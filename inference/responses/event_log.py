"""A streamed background response's events, kept in a Redis stream so any API process can
serve them: the POST that started it (``background`` with ``stream``), and
``GET /v1/responses/{id}?stream=true&starting_after=N``, which picks the stream up again
after a dropped connection.

Each event is one entry whose id is ``0-(sequence_number + 1)``, so "the events after N" is
one range read. The runner appends as the generation goes (inference/responses/background.py)
and closes the log with an end marker whatever ends it (done, failed, cancelled); readers
follow it until a final event or the marker. The log outlives the response by
``KEPT_AFTER_END_S`` (a resume comes soon after a drop); a run that stops appending (its
process died) expires ``KEPT_WHILE_RUNNING_S`` after its last event.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

from controlplane.common.redis_clients import async_redis, redis_key
from engine.redis_outage import TRANSPORT_ERRORS

logger = logging.getLogger(__name__)

KEPT_AFTER_END_S = 3600
KEPT_WHILE_RUNNING_S = 6 * 3600
# A reader waits this long for the next event before asking whether the response still runs.
_WAIT_MS = 2000
# The events after which nothing more comes.
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed", "error")
_EVENT, _END = b"e", b"end"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def _key(response_id: str) -> str:
    return redis_key("response_events", response_id)


def _entry_id(sequence_number: int) -> str:
    return f"0-{sequence_number + 1}"


class EventLogWriter:
    """Appends one response's events. Redis away: the events are dropped with one warning
    (the response itself is still stored when it ends; a reader ends when it does)."""

    def __init__(self, response_id: str):
        self.response_id = response_id
        self._last = 0  # the last entry's sequence part
        self._broken = False

    async def append(self, event: dict[str, Any]) -> None:
        sequence = int(event["sequence_number"])
        await self._write(_entry_id(sequence), {_EVENT: _encode(event)}, KEPT_WHILE_RUNNING_S)
        self._last = sequence + 1

    async def end(self, reason: str) -> None:
        """The marker after the last event: ``reason`` is the response's status."""
        await self._write(f"0-{self._last + 1}", {_END: reason}, KEPT_AFTER_END_S)

    async def _write(self, entry_id: str, fields: dict, ttl_s: int) -> None:
        if self._broken:
            return
        try:
            pipe = async_redis().pipeline(transaction=False)
            pipe.xadd(_key(self.response_id), fields, id=entry_id)
            pipe.expire(_key(self.response_id), ttl_s)
            await pipe.execute()
        except TRANSPORT_ERRORS as exc:
            self._broken = True
            logger.warning("events of response %s not kept: %s", self.response_id, exc)


async def log_exists(response_id: str) -> bool:
    return bool(await async_redis().exists(_key(response_id)))


async def follow(
    response_id: str, *, after: int, still_running: Callable[[], Awaitable[bool]]
) -> AsyncIterator[dict[str, Any]]:
    """The events numbered above ``after`` (-1: all), as they come, until a final event or
    the end marker. ``still_running()`` is asked after each quiet wait: False (the response
    ended without its marker, its runner gone) ends the stream."""
    last = _entry_id(after) if after >= 0 else "0-0"
    client = async_redis()
    while True:
        read = await client.xread({_key(response_id): last}, count=512, block=_WAIT_MS)
        entries = read[0][1] if read else []
        if not entries and not await still_running():
            return
        for entry_id, fields in entries:
            last = entry_id
            if _END in fields:
                return
            event = _decode(fields[_EVENT])
            yield event
            if event.get("type") in FINAL_EVENTS:
                return
