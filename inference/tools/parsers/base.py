"""The events a tool-call parser emits, and the interface every parser implements.

A parser reads one generated sample's text as it arrives (``feed``) and says what it is:
plain content, the start of a call (its id and function name), or a piece of a call's
arguments. ``finish`` flushes what was held back. ``parse`` does both over a whole text and
gathers the result, so streamed and whole responses come from the same code.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from inference.tools.definitions import ToolCall, new_call_id


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    """A new call: ``index`` counts the sample's calls from 0."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ArgumentsDelta:
    index: int
    text: str


Event = ContentDelta | ToolCallStart | ArgumentsDelta


@dataclass
class ParsedOutput:
    """A whole sample: the text that is not a call (None when there is none) and the calls."""

    content: str | None = None
    calls: list[ToolCall] = field(default_factory=list)


def collect(events: list[Event]) -> ParsedOutput:
    """Gather a sample's events into its content and calls."""
    texts: list[str] = []
    starts: dict[int, ToolCallStart] = {}
    arguments: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            texts.append(event.text)
        elif isinstance(event, ToolCallStart):
            starts[event.index] = event
            arguments.setdefault(event.index, [])
        else:
            arguments.setdefault(event.index, []).append(event.text)
    calls = [
        ToolCall(id=start.id, name=start.name, arguments="".join(arguments[index]))
        for index, start in sorted(starts.items())
    ]
    content = "".join(texts)
    if calls:  # the whitespace around calls is formatting, not an answer
        content = content.strip()
    return ParsedOutput(content=content or None, calls=calls)


def arguments_text(arguments: Any) -> str:
    """A call's arguments as JSON text (models write an object; some write it as a string)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


class ToolCallParser(ABC):
    """One sample's parser; ``max_calls`` (None: any number) drops calls beyond it."""

    def __init__(self, *, max_calls: int | None = None):
        self.max_calls = max_calls
        self.num_calls = 0

    @abstractmethod
    def feed(self, text: str) -> list[Event]:
        """Events for the next piece of generated text (text may be held back)."""

    @abstractmethod
    def finish(self) -> list[Event]:
        """Events for whatever was held back, once the sample has ended."""

    def parse(self, text: str) -> ParsedOutput:
        return collect(self.feed(text) + self.finish())

    def call_events(self, name: str, arguments: str) -> list[Event]:
        """A whole call as events, or none once ``max_calls`` calls were made."""
        if self.max_calls is not None and self.num_calls >= self.max_calls:
            return []
        index = self.num_calls
        self.num_calls += 1
        return [ToolCallStart(index, new_call_id(), name), ArgumentsDelta(index, arguments)]


def held_back_prefix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that could begin ``marker``: hold it back."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
