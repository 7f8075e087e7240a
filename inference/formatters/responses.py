"""The Responses API's objects: typed stream events and the whole ``response``.

One state machine serves both: the engine's text becomes output items (a ``reasoning`` item
for a thinking model's thinking, then an assistant message, or ``function_call`` items when
the request's tools are parsed), each announced, filled and
closed with the events the openai SDK's ``responses.stream`` accumulates, numbered by
``sequence_number``. The whole response is the last event's ``response``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from typing import Any

from inference.formatters.base import EngineItem, EventsFormatter
from inference.formatters.chat import chat_logprobs
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.responses import objects
from inference.responses.context import ResponseContext, new_item_id
from inference.tools import ArgumentsDelta, ContentDelta, ToolCallStart, parser_for


class ResponsesFormatter(EventsFormatter):
    def __init__(self, plan: GenerationPlan, stats: GenerationStats):
        super().__init__(plan, stats)
        assert plan.response is not None, "a Responses plan carries its ResponseContext"
        self.context: ResponseContext = plan.response
        # With function tools, the text is read for calls (the chat plan's ToolSetup).
        self._parser = parser_for(plan.tools) if plan.tools is not None else None
        self._sequence = 0
        self.output: list[dict[str, Any]] = []
        self._message: int | None = None  # output index of the open message
        self._reasoning: int | None = None  # output index of the open reasoning item
        self._thoughts: list[str] = []
        self._texts: list[str] = []
        self._calls: dict[int, int] = {}  # parser's call index -> output index
        self._arguments: dict[int, list[str]] = {}
        self._held = ""  # whitespace before any message, while tools are parsed
        # The answer's token logprobs (include "message.output_text.logprobs"): given where
        # each token's text is plain answer, so not with tools parsed or a thinking model's
        # answer split from its thinking; those come back without them.
        self._with_logprobs = (
            self.context.logprobs and self._parser is None and plan.reasoning is None
        )
        self._logprobs: list[dict[str, Any]] = []  # the open message's, so far
        self._pending: list[dict[str, Any]] = []  # of tokens whose text is still to come
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

    def _add_item(self, item: dict[str, Any], part: dict[str, Any]) -> tuple[int, list[dict]]:
        """Announce ``item`` at the end of the output, then its one (empty) content part."""
        index = len(self.output)
        self.output.append(item)
        added = self.event(
            "response.output_item.added", output_index=index, item=copy.deepcopy(item)
        )
        item["content"] = [part]
        part_added = self.event(
            "response.content_part.added",
            item_id=item["id"],
            output_index=index,
            content_index=0,
            part=copy.deepcopy(part),
        )
        return index, [added, part_added]

    def _item_done(
        self, index: int, status: str, part: dict[str, Any], done: str, **extra: Any
    ) -> list[dict]:
        """Close the item at ``index`` with its whole part: ``done`` (its text's last event),
        the part's and the item's."""
        item = self.output[index]
        fields = dict(item_id=item["id"], output_index=index, content_index=0)
        item["status"] = status
        item["content"] = [part]
        return [
            self.event(done, **fields, text=part["text"], **extra),
            self.event("response.content_part.done", **fields, part=copy.deepcopy(part)),
            self.event("response.output_item.done", output_index=index, item=copy.deepcopy(item)),
        ]

    def _think(self, text: str) -> list[dict]:
        events: list[dict] = []
        if self._reasoning is None:
            item = objects.reasoning_item(new_item_id("rs"), status="in_progress", text=None)
            self._reasoning, events = self._add_item(item, objects.reasoning_text_part(""))
            self._thoughts = []
        self._thoughts.append(text)  # joined once, when the item closes
        item = self.output[self._reasoning]
        fields = dict(item_id=item["id"], output_index=self._reasoning, content_index=0)
        events.append(self.event("response.reasoning_text.delta", **fields, delta=text))
        return events

    def _close_reasoning(self, status: str) -> list[dict]:
        if self._reasoning is None:
            return []
        index, self._reasoning = self._reasoning, None
        part = objects.reasoning_text_part("".join(self._thoughts))
        return self._item_done(index, status, part, "response.reasoning_text.done")

    def _open_message(self) -> list[dict]:
        opening = self._close_reasoning("completed")  # the answer starts: thinking is over
        item = objects.message_item(new_item_id("msg"), status="in_progress", text=None)
        self._message, events = self._add_item(item, objects.output_text_part(""))
        self._texts = []
        return [*opening, *events]

    def _text(self, text: str) -> list[dict]:
        events = self._open_message() if self._message is None else []
        self._texts.append(text)  # joined once, when the message closes
        logprobs, self._pending = self._pending, []
        self._logprobs.extend(logprobs)
        item = self.output[self._message]
        fields = dict(item_id=item["id"], output_index=self._message, content_index=0)
        events.append(
            self.event("response.output_text.delta", **fields, delta=text, logprobs=logprobs)
        )
        return events

    def _close_message(self, status: str) -> list[dict]:
        if self._message is None:
            return []
        index, self._message = self._message, None
        # Tokens whose text never came (a stop string held, then cut) are not the answer's.
        logprobs, self._logprobs, self._pending = self._logprobs, [], []
        part = objects.output_text_part("".join(self._texts))
        part["logprobs"] = logprobs
        return self._item_done(
            index, status, part, "response.output_text.done", logprobs=copy.deepcopy(logprobs)
        )

    def _call_start(self, call: ToolCallStart) -> list[dict]:
        events = self._close_reasoning("completed") + self._close_message("completed")
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
        events.extend(self._close_reasoning(status))
        if not self.output:  # nothing generated: still one (empty) message
            events.extend(self._open_message())
        events.extend(self._close_message(status))
        events.extend(self._close_calls(status))
        stats = self.stats
        usage = objects.usage(
            self.plan.prompt_tokens,
            stats.num_completion_tokens,
            stats.num_cached_tokens,
            stats.num_reasoning_tokens,
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
            if chunk.reasoning:
                for event in self._think(chunk.reasoning):
                    yield event
            if self._with_logprobs and chunk.logprobs:
                self._pending.extend(chat_logprobs(chunk.logprobs)["content"])
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
