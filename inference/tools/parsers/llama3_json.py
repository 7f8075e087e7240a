"""Llama 3.1's JSON tool calls: the whole reply is ``{"name": ..., "parameters": {...}}``.

Optionally after ``<|python_tag|>``, and several calls separated by ``;``. A reply that
starts otherwise is content, streamed as it comes; one that starts like a call is held until
the sample ends, then parsed (and kept as content if it is not calls after all).
"""

from __future__ import annotations

import json

from inference.tools.parsers.base import ContentDelta, Event, ToolCallParser, arguments_text

PYTHON_TAG = "<|python_tag|>"


def parse_calls(text: str) -> list[tuple[str, str]] | None:
    """The calls of a whole reply, or None when it is not only calls."""
    text = text.strip().removeprefix(PYTHON_TAG).strip()
    decoder, calls, position = json.JSONDecoder(), [], 0
    while position < len(text):
        try:
            value, position = decoder.raw_decode(text, position)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        calls.append(
            (value["name"], arguments_text(value.get("parameters", value.get("arguments", {}))))
        )
        rest = text[position:].lstrip()
        if rest.startswith(";"):
            rest = rest[1:].lstrip()
        position = len(text) - len(rest)
    return calls or None


class Llama3JsonParser(ToolCallParser):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._buffer = ""
        self._mode: str | None = None  # None: undecided, "content" or "calls"

    def feed(self, text: str) -> list[Event]:
        if self._mode == "content":
            return [ContentDelta(text)] if text else []
        self._buffer += text
        if self._mode == "calls":
            return []
        head = self._buffer.lstrip()
        if not head or (PYTHON_TAG.startswith(head) and head != PYTHON_TAG):
            return []  # cannot tell yet
        if head.startswith(("{", PYTHON_TAG)):
            self._mode = "calls"
            return []
        self._mode = "content"
        buffer, self._buffer = self._buffer, ""
        return [ContentDelta(buffer)]

    def finish(self) -> list[Event]:
        buffer, self._buffer = self._buffer, ""
        if not buffer:
            return []
        calls = parse_calls(buffer) if self._mode != "content" else None
        if calls is None:
            return [ContentDelta(buffer)]
        return [event for name, arguments in calls for event in self.call_events(name, arguments)]
