"""Outputs whose shape the grammar forced (``tool_choice`` named or "required", see choice.py).

Named: the whole output is the arguments, streamed as they come. Required: the output is a
JSON array of ``{"name": ..., "parameters": {...}}``; each call is emitted as soon as its
object closes (a small scanner follows strings and nesting; no partial-JSON parsing).
"""

from __future__ import annotations

import json

from inference.tools.definitions import new_call_id
from inference.tools.parsers.base import (
    ArgumentsDelta,
    ContentDelta,
    Event,
    ToolCallParser,
    ToolCallStart,
    arguments_text,
)


class NamedCallParser(ToolCallParser):
    def __init__(self, name: str, **kwargs):
        super().__init__(**kwargs)
        self.name = name
        self._started = False

    def _start(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        self.num_calls = 1
        return [ToolCallStart(0, new_call_id(), self.name)]

    def feed(self, text: str) -> list[Event]:
        if not text:
            return []
        return [*self._start(), ArgumentsDelta(0, text)]

    def finish(self) -> list[Event]:
        return self._start()


class RequiredCallsParser(ToolCallParser):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._text = ""  # everything, kept in case it is not an array of calls after all
        self._item: list[str] = []  # the object being read, at depth 1 of the array
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._emitted = False

    def feed(self, text: str) -> list[Event]:
        self._text += text
        events: list[Event] = []
        for char in text:
            if self._depth >= 2:
                self._item.append(char)
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "[{":
                self._depth += 1
                if self._depth == 2:
                    self._item = [char]
            elif char in "]}":
                self._depth -= 1
                if self._depth == 1:
                    events += self._item_done("".join(self._item))
        return events

    def _item_done(self, item: str) -> list[Event]:
        try:
            value = json.loads(item)
        except ValueError:
            return []
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return []
        self._emitted = True
        arguments = value.get("parameters", value.get("arguments", {}))
        return self.call_events(value["name"], arguments_text(arguments))

    def finish(self) -> list[Event]:
        # No call at all (output cut before the first closed): what was written is content.
        if not self._emitted and self._text.strip():
            return [ContentDelta(self._text)]
        return []
