"""A batch's input lines, read from storage in a thread, a few dozen at a time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from itertools import islice

from controlplane.batches.input_lines import InputLine, LineError, read_input_lines
from controlplane.batches.models import Batch
from controlplane.batches.services import file_open

LINES_PER_READ = 64


def _lines(batch: Batch) -> Iterator[InputLine | LineError]:
    if batch.input_file is None:
        raise FileNotFoundError(f"the input file {batch.input_file_id_text} was deleted")
    with file_open(batch.input_file) as handle:
        yield from read_input_lines(handle, endpoint=batch.endpoint)


async def input_lines(batch: Batch) -> AsyncIterator[InputLine | LineError]:
    """Every non-blank line, checked (controlplane.batches.input_lines), off the event loop."""
    lines = _lines(batch)
    try:
        while chunk := await asyncio.to_thread(lambda: list(islice(lines, LINES_PER_READ))):
            for item in chunk:
                yield item
    finally:
        await asyncio.to_thread(lines.close)


def count_lines(batch: Batch) -> int:
    """How many requests the batch holds (good and bad lines), in one streaming pass."""
    return sum(1 for _ in _lines(batch))
