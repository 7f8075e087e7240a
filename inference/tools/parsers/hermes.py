"""The Hermes format (Qwen2.5, Qwen3, NousResearch Hermes): calls in ``<tool_call>`` blocks.

    Let me check.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Text outside the blocks is content. A block whose body is not a call (bad JSON, no name)
is kept as content, as the model wrote it. A call is emitted when its block closes (or the
sample ends inside it): its start and its arguments together. Whitespace at the end of
content is held until more content follows, so the newlines around calls are not streamed
as an answer (a whole response drops them too).
"""

from __future__ import annotations

import json
from typing import Any

from inference.tools.parsers.base import (
    ContentDelta,
    Event,
    ToolCallParser,
    arguments_text,
    held_back_prefix,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def call_from_json(body: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of ``{"name": ..., "arguments": ...}``; None if it is not one."""
    try:
        value: Any = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    return value["name"], arguments_text(arguments)


class HermesParser(ToolCallParser):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._buffer = ""
        self._in_call = False
        self._spaces = ""  # trailing whitespace of the content, held back

    def _content(self, text: str) -> list[Event]:
        text = self._spaces + text
        body = text.rstrip()
        self._spaces = text[len(body) :]
        return [ContentDelta(body)] if body else []

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        events: list[Event] = []
        while True:
            if self._in_call:
                end = self._buffer.find(CLOSE)
                if end < 0:
                    return events
                events += self._close(self._buffer[:end])
                self._buffer = self._buffer[end + len(CLOSE) :]
                self._in_call = False
                continue
            start = self._buffer.find(OPEN)
            if start < 0:
                keep = held_back_prefix(self._buffer, OPEN)
                content = self._buffer[: len(self._buffer) - keep]
                self._buffer = self._buffer[len(content) :]
                return events + self._content(content)
            events += self._content(self._buffer[:start])
            self._buffer = self._buffer[start + len(OPEN) :]
            self._in_call = True

    def _close(self, body: str) -> list[Event]:
        call = call_from_json(body.strip())
        if call is None:  # not a call after all: the text as written
            return [ContentDelta(f"{OPEN}{body}{CLOSE}")]
        return self.call_events(*call)

    def finish(self) -> list[Event]:
        buffer, self._buffer = self._buffer, ""
        if not self._in_call:
            events = self._content(buffer)
            if not self.num_calls and self._spaces:  # an answer in words keeps all its text
                events.append(ContentDelta(self._spaces))
            return events
        self._in_call = False
        call = call_from_json(buffer.strip())  # the sample ended before </tool_call>
        if call is None:
            return [ContentDelta(OPEN + buffer)]
        return self.call_events(*call)
