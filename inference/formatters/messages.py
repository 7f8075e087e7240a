"""Anthropic's Messages API objects: the ``message`` and its stream events.

One state machine serves both, as for the Responses API: the engine's text becomes content
blocks (``thinking``, ``text``, ``tool_use``), each opened, filled and closed with the events
the ``anthropic`` SDK's ``messages.stream`` accumulates:

    message_start, ping, (content_block_start, content_block_delta..., content_block_stop)...,
    message_delta (stop_reason, usage), message_stop

and the whole message is what ``message_delta`` completes. Blocks are built in one place,
``block_events(reasoning, answer)``: reasoning text becomes a ``thinking`` block, the answer
is read for tool calls (the request's tool parser) into ``text`` and ``tool_use`` blocks.
``split_reasoning`` says which part of a chunk's text is reasoning (the model's reasoning
parser, inference/reasoning/, split it off before this formatter reads it): it becomes a
``thinking`` block.

Usage follows Anthropic: ``input_tokens`` are the prompt tokens the prefix cache did not
hold, ``cache_read_input_tokens`` the ones it did (their sum is the whole prompt).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from inference.formatters.base import EngineItem, EventsFormatter
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.tools import ArgumentsDelta, ContentDelta, ToolCallStart, parser_for
from inference.transport import GenerationChunk

# Anthropic names tool_use ids toolu_...; the parsers' call ids are call_...
TOOL_USE_PREFIX = "toolu_"


def _tool_use_id(call_id: str) -> str:
    return TOOL_USE_PREFIX + call_id.removeprefix("call_")


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the block's ``input`` ({} for a call cut before its JSON closed,
    which only a ``max_tokens`` stop leaves)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesFormatter(EventsFormatter):
    def __init__(self, plan: GenerationPlan, stats: GenerationStats):
        super().__init__(plan, stats)
        # With tools, the answer is read for calls (the chat plan's ToolSetup).
        self._parser = parser_for(plan.tools) if plan.tools is not None else None
        self.content: list[dict[str, Any]] = []
        self._open: int | None = None  # index of the open block
        self._pieces: list[str] = []  # the open block's text or arguments, joined at its close
        self._calls: dict[int, int] = {}  # parser's call index -> block index
        self._held = ""  # whitespace before any text block, while tools are parsed
        self._stop_string: str | int | None = None
        self.final: dict[str, Any] | None = None

    # The hook for reasoning parsers ------------------------------------------------------------

    def split_reasoning(self, chunk: GenerationChunk) -> tuple[str, str]:
        """(reasoning text, answer text) of one engine chunk: the served model's reasoning
        parser split them before any formatter reads a chunk (inference/reasoning/split.py);
        a model without one writes answer only."""
        return chunk.reasoning, chunk.text

    # Blocks -------------------------------------------------------------------------------------

    def block_events(self, reasoning: str, answer: str, *, finishing: bool = False) -> list[dict]:
        """The one place content blocks are built: ``reasoning`` text into a thinking block,
        ``answer`` text into text blocks and (parsed) tool_use blocks, as stream events."""
        events: list[dict] = []
        if reasoning:
            events += self._append("thinking", reasoning)
        if self._parser is None:
            parsed = [ContentDelta(answer)] if answer else []
        else:
            parsed = self._parser.feed(answer) if answer else []
            if finishing:
                parsed += self._parser.finish()
        for part in parsed:
            if isinstance(part, ContentDelta):
                events += self._text(part.text)
            elif isinstance(part, ToolCallStart):
                events += self._start_tool_use(part)
            elif isinstance(part, ArgumentsDelta):
                events += self._arguments(part)
        return events

    def _text(self, text: str) -> list[dict]:
        text = self._held + text
        # With tools, whitespace around calls is formatting: no text block for it alone.
        is_open_text = self._open is not None and self.content[self._open]["type"] == "text"
        if self._parser is not None and not is_open_text and not text.strip():
            self._held = text
            return []
        self._held = ""
        return self._append("text", text) if text else []

    def _append(self, kind: str, text: str) -> list[dict]:
        """``text`` added to the open block of ``kind`` (opened first if another is open)."""
        events = []
        if self._open is None or self.content[self._open]["type"] != kind:
            events += self._close()
            if kind == "text":
                events += self._start({"type": "text", "text": ""})
            else:
                events += self._start({"type": "thinking", "thinking": "", "signature": ""})
        self._pieces.append(text)
        delta = (
            {"type": "text_delta", "text": text}
            if kind == "text"
            else {"type": "thinking_delta", "thinking": text}
        )
        events.append({"type": "content_block_delta", "index": self._open, "delta": delta})
        return events

    def _start(self, block: dict[str, Any]) -> list[dict]:
        self._open, self._pieces = len(self.content), []
        self.content.append(block)
        return [{"type": "content_block_start", "index": self._open, "content_block": dict(block)}]

    def _start_tool_use(self, call: ToolCallStart) -> list[dict]:
        events = self._close()
        block = {"type": "tool_use", "id": _tool_use_id(call.id), "name": call.name, "input": {}}
        events += self._start(block)
        self._calls[call.index] = self._open
        return events

    def _arguments(self, delta: ArgumentsDelta) -> list[dict]:
        index = self._calls[delta.index]
        if index != self._open:  # parsers finish one call before the next: never happens
            return []
        self._pieces.append(delta.text)
        return [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": delta.text},
            }
        ]

    def _close(self) -> list[dict]:
        if self._open is None:
            return []
        index, self._open = self._open, None
        block, text = self.content[index], "".join(self._pieces)
        if block["type"] == "tool_use":
            block["input"] = _tool_input(text)
        else:
            block[block["type"]] = text
        return [{"type": "content_block_stop", "index": index}]

    # The message --------------------------------------------------------------------------------

    def usage(self) -> dict[str, int]:
        cached = self.stats.num_cached_tokens
        return {
            "input_tokens": self.plan.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": self.stats.num_completion_tokens,
        }

    def stop(self) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence) of the finished generation."""
        if self.stats.finish_reason == "length":
            return "max_tokens", None
        if any(block["type"] == "tool_use" for block in self.content):
            return "tool_use", None
        if isinstance(self._stop_string, str) and self._stop_string in self.plan.output.stop:
            return "stop_sequence", self._stop_string
        return "end_turn", None

    def message(self, stop_reason: str | None = None, stop_sequence: str | None = None) -> dict:
        return {
            "id": self.plan.request_id,
            "type": "message",
            "role": "assistant",
            "model": self.plan.model,
            "content": [dict(block) for block in self.content],
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": self.usage(),
        }

    def _observe(self, item: EngineItem) -> GenerationChunk:
        prompt_index, choice, chunk = item
        self.stats.observe(prompt_index, choice, chunk)
        if chunk.finish_reason:
            self._stop_string = chunk.stop_reason
        return chunk

    def _finish(self) -> list[dict]:
        events = self.block_events("", "", finishing=True) + self._close()
        stop_reason, stop_sequence = self.stop()
        self.final = self.message(stop_reason, stop_sequence)
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        events.append({"type": "message_delta", "delta": delta, "usage": self.usage()})
        events.append({"type": "message_stop"})
        return events

    # The interface ------------------------------------------------------------------------------

    async def stream(self, items: AsyncIterator[EngineItem]) -> AsyncIterator[dict]:
        # The engine's first output is already in (the use case waits for it before answering),
        # and it says how much of the prompt was cached: message_start can tell.
        first = await anext(items, None)
        chunk = self._observe(first) if first is not None else None
        yield {"type": "message_start", "message": self.message()}
        yield {"type": "ping"}
        while chunk is not None:
            for event in self.block_events(*self.split_reasoning(chunk)):
                yield event
            item = await anext(items, None)
            chunk = self._observe(item) if item is not None else None
        for event in self._finish():
            yield event
