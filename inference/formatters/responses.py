"""The Responses API's objects: typed stream events and the whole ``response``.

One state machine serves both: the engine's text becomes output items (an assistant message,
or ``function_call`` items when the request's tools are parsed), each announced, filled and
closed with the events the openai SDK's ``responses.stream`` accumulates, numbered by
``sequence_number``. The whole response is the last event's ``response``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from typing import Any

from inference.formatters.base import EngineItem, ResponseFormatter
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.responses import objects
from inference.responses.context import ResponseContext, new_item_id
from inference.tools import ArgumentsDelta, ContentDelta, ToolCallStart, parser_for


class ResponsesFormatter(ResponseFormatter):
    def __init__(self, plan: GenerationPlan, stats: GenerationStats):
        super().__init__(plan, stats)
        assert plan.response is not None, "a Responses plan carries its ResponseContext"
        self.context: ResponseContext = plan.response
        # With function tools, the text is read for calls (the chat plan's ToolSetup).
        self._parser = parser_for(plan.tools) if plan.tools is not None else None
        self._sequence = 0
        self.output: list[dict[str, Any]] = []
        self._message: int | None = None  # output index of the open message
        self._texts: list[str] = []
        self._calls: dict[int, int] = {}  # parser's call index -> output index
        self._arguments: dict[int, list[str]] = {}
        self._held = ""  # whitespace before any message, while tools are parsed
        self.final: dict[str, Any] | None = None

    # Events ----------------------------------------------------------------------------------

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def error_event(self, error: dict[str, Any]) -> dict[str, Any]:
        """An ``error`` event from an OpenAI error body (a failure mid-stream)."""
        body = error.get("error", error)
        return self.event(
            "error", code=body.get("code"), message=body.get("message"), param=body.get("param")
        )

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        # A snapshot: the output items change as the stream goes on, the event must not.
        output = copy.deepcopy(self.output)
        return objects.response_object(
            self.context, model=self.plan.model, status=status, output=output, **extra
        )

    def _open_message(self) -> list[dict]:
        index = len(self.output)
        item = objects.message_item(new_item_id("msg"), status="in_progress", text=None)
        self.output.append(item)
        self._message, self._texts = index, []
        added = self.event(
            "response.output_item.added", output_index=index, item=copy.deepcopy(item)
        )
        item["content"] = [objects.output_text_part("")]
        part = self.event(
            "response.content_part.added",
            item_id=item["id"],
            output_index=index,
            content_index=0,
            part=objects.output_text_part(""),
        )
        return [added, part]

    def _text(self, text: str) -> list[dict]:
        events = self._open_message() if self._message is None else []
        self._texts.append(text)  # joined once, when the message closes
        item = self.output[self._message]
        fields = dict(item_id=item["id"], output_index=self._message, content_index=0)
        events.append(self.event("response.output_text.delta", **fields, delta=text, logprobs=[]))
        return events

    def _close_message(self, status: str) -> list[dict]:
        if self._message is None:
            return []
        index, self._message = self._message, None
        item = self.output[index]
        text = "".join(self._texts)
        fields = dict(item_id=item["id"], output_index=index, content_index=0)
        item["status"] = status
        item["content"] = [objects.output_text_part(text)]
        return [
            self.event("response.output_text.done", **fields, text=text, logprobs=[]),
            self.event("response.content_part.done", **fields, part=objects.output_text_part(text)),
            self.event("response.output_item.done", output_index=index, item=copy.deepcopy(item)),
        ]

    def _call_start(self, call: ToolCallStart) -> list[dict]:
        events = self._close_message("completed")
        index = len(self.output)
        item = objects.function_call_item(
            new_item_id("fc"), call_id=call.id, name=call.name, arguments="", status="in_progress"
        )
        self.output.append(item)
        self._calls[call.index], self._arguments[call.index] = index, []
        events.append(
            self.event("response.output_item.added", output_index=index, item=copy.deepcopy(item))
        )
        return events

    def _call_arguments(self, delta: ArgumentsDelta) -> list[dict]:
        index = self._calls[delta.index]
        self._arguments[delta.index].append(delta.text)  # joined once, when the call closes
        item_id = self.output[index]["id"]
        return [
            self.event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=delta.text,
            )
        ]

    def _close_calls(self, status: str) -> list[dict]:
        events = []
        for call, index in self._calls.items():
            item = self.output[index]
            item["arguments"] = "".join(self._arguments[call])
            item["status"] = status
            events.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            )
            events.append(
                self.event(
                    "response.output_item.done", output_index=index, item=copy.deepcopy(item)
                )
            )
        self._calls.clear()
        return events

    def _parsed(self, parsed: list) -> list[dict]:
        events: list[dict] = []
        for part in parsed:
            if isinstance(part, ContentDelta):
                text = self._held + part.text
                # With tools, whitespace around calls is formatting: no message for it alone.
                if self._parser is not None and self._message is None and not text.strip():
                    self._held = text
                elif text:
                    self._held = ""
                    events.extend(self._text(text))
            elif isinstance(part, ToolCallStart):
                events.extend(self._call_start(part))
            elif isinstance(part, ArgumentsDelta):
                events.extend(self._call_arguments(part))
        return events

    def _finish(self) -> list[dict]:
        events = self._parsed(self._parser.finish()) if self._parser is not None else []
        reason = objects.INCOMPLETE_REASON.get(self.stats.finish_reason or "")
        status = "incomplete" if reason else "completed"
        if not self.output:  # nothing generated: still one (empty) message
            events.extend(self._open_message())
        events.extend(self._close_message(status))
        events.extend(self._close_calls(status))
        usage = objects.usage(
            self.plan.prompt_tokens, self.stats.num_completion_tokens, self.stats.num_cached_tokens
        )
        self.final = self._response(
            status, usage=usage, incomplete_reason=reason, completed_at=int(time.time())
        )
        kind = "response.incomplete" if reason else "response.completed"
        events.append(self.event(kind, response=self.final))
        return events

    # The interface ---------------------------------------------------------------------------

    async def stream(self, items: AsyncIterator[EngineItem]) -> AsyncIterator[dict]:
        yield self.event("response.created", response=self._response("in_progress"))
        yield self.event("response.in_progress", response=self._response("in_progress"))
        async for prompt_index, choice, chunk in items:
            self.stats.observe(prompt_index, choice, chunk)
            if not chunk.text:
                continue
            if self._parser is None:
                parsed = [ContentDelta(chunk.text)]
            else:
                parsed = self._parser.feed(chunk.text)
            for event in self._parsed(parsed):
                yield event
        for event in self._finish():
            yield event

    async def collect(self, items: AsyncIterator[EngineItem]) -> dict[str, Any]:
        async for _event in self.stream(items):
            pass
        assert self.final is not None
        return self.final
