"""Reading a batch's JSONL input one line at a time, each line checked on its own.

A line is ``{"custom_id": ..., "method": "POST", "url": <the batch's endpoint>, "body": {...}}``.
A bad line does not fail the batch: it becomes an error-file line (``LineError``) and the good
lines run. The file streams from storage; no line longer than the API's body cap is read whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings

from controlplane.common.json_text import JsonTextError, is_valid_text, loads_json

MAX_CUSTOM_ID_CHARS = 512


@dataclass(frozen=True)
class InputLine:
    line: int  # 1-based
    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineError:
    line: int
    custom_id: str | None
    code: str
    message: str


def _raw_lines(handle: IO[bytes], max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) for each line; None for a line over ``max_bytes`` (skipped)."""
    number = 0
    while True:
        chunk = handle.readline(max_bytes + 1)
        if not chunk:
            return
        number += 1
        if len(chunk) > max_bytes and not chunk.endswith(b"\n"):
            while chunk and not chunk.endswith(b"\n"):  # drop the rest of the long line
                chunk = handle.readline(max_bytes + 1)
            yield number, None
            continue
        yield number, chunk


def _check(number: int, raw: bytes, endpoint: str) -> InputLine | LineError:
    try:  # the rules of an API request's body: bounded nesting, valid Unicode
        item = loads_json(raw)
    except JsonTextError as exc:  # its custom_id, when the line parsed and that one is text
        known = exc.parsed.get("custom_id") if isinstance(exc.parsed, dict) else None
        custom_id = known if isinstance(known, str) and is_valid_text(known) else None
        return LineError(
            number, custom_id, "invalid_json_line", f"This line is refused: {exc.message}"
        )
    if not isinstance(item, dict):
        return LineError(number, None, "invalid_json_line", "Each line must be a JSON object.")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        return LineError(
            number,
            None,
            "missing_required_parameter",
            f"Each line needs a `custom_id`: a string of 1 to {MAX_CUSTOM_ID_CHARS} characters.",
        )
    if item.get("method") != "POST":
        return LineError(number, custom_id, "invalid_method", "`method` must be `POST`.")
    if item.get("url") != endpoint:
        return LineError(
            number,
            custom_id,
            "invalid_url",
            f"`url` must be this batch's endpoint, `{endpoint}`; got {item.get('url')!r}.",
        )
    body = item.get("body")
    if not isinstance(body, dict):
        return LineError(
            number, custom_id, "missing_required_parameter", "`body` must be a JSON object."
        )
    return InputLine(number, custom_id, body)


def read_input_lines(
    handle: IO[bytes], *, endpoint: str, max_line_bytes: int | None = None
) -> Iterator[InputLine | LineError]:
    """Every non-blank line of ``handle``, checked; a repeated ``custom_id`` is an error line."""
    limit = max_line_bytes or settings.API_MAX_REQUEST_BYTES
    seen: set[str] = set()
    for number, raw in _raw_lines(handle, limit):
        if raw is None:
            yield LineError(number, None, "line_too_long", f"This line is over {limit} bytes.")
            continue
        if not raw.strip():
            continue
        checked = _check(number, raw, endpoint)
        if isinstance(checked, InputLine):
            if checked.custom_id in seen:
                checked = LineError(
                    number,
                    checked.custom_id,
                    "duplicate_custom_id",
                    f"The custom_id {checked.custom_id!r} is used by an earlier line; each "
                    "line needs its own.",
                )
            else:
                seen.add(checked.custom_id)
        yield checked
