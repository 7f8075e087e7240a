"""``chat.completion`` objects and ``chat.completion.chunk`` stream chunks."""

from __future__ import annotations

from typing import Any

from inference.formatters.base import ChoiceFormatter, ChoiceOutput
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.tools import ContentDelta, ToolCall, ToolCallParser, ToolCallStart, parser_for
from inference.tools.parsers import Event
from inference.transport import GenerationChunk, TokenLogprob


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    """Per-token logprobs in chat format: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    return {
        "content": [
            {
                "token": entry.token,
                "logprob": entry.logprob,
                "bytes": list(entry.token.encode()),
                "top_logprobs": [
                    {"token": text, "logprob": logprob, "bytes": list(text.encode())}
                    for _token_id, text, logprob in entry.top
                ],
            }
            for entry in entries
        ]
    }


def _delta_choice(
    index: int, delta: dict, *, logprobs=None, finish_reason=None, stop_reason=None
) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    return choice


def tool_call_deltas(events: list[Event]) -> tuple[str, list[dict]]:
    """A chunk's parser events as delta ``content`` and ``tool_calls`` entries: a call's
    first entry has its index, id, type and function name; later ones add arguments."""
    texts: list[str] = []
    entries: dict[int, dict] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            texts.append(event.text)
        elif isinstance(event, ToolCallStart):
            entries[event.index] = {
                "index": event.index,
                "id": event.id,
                "type": "function",
                "function": {"name": event.name, "arguments": ""},
            }
        else:
            entry = entries.setdefault(
                event.index, {"index": event.index, "function": {"arguments": ""}}
            )
            entry["function"]["arguments"] += event.text
    return "".join(texts), list(entries.values())


def reasoning_fields(text: str | None) -> dict[str, Any]:
    """The thinking under both names clients read: ``reasoning_content`` (DeepSeek's, vLLM
    before 0.11) and ``reasoning`` (vLLM's and OpenRouter's since)."""
    return {"reasoning_content": text, "reasoning": text}


def tool_calls_json(calls: list[ToolCall]) -> list[dict]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]


def legacy_call_delta(calls: list[dict]) -> dict | None:
    """A stream's ``tool_calls`` entries in the deprecated ``function_call`` shape: the first
    call's name, then its arguments; the old API made one call a turn."""
    first = next((c for c in calls if c["index"] == 0), None)
    if first is None:
        return None
    function = first["function"]
    delta = {"arguments": function["arguments"]}
    if "name" in function:
        delta = {"name": function["name"], **delta}
    return delta


class ChatFormatter(ChoiceFormatter):
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"
    echoes_service_tier = True

    def __init__(self, plan: GenerationPlan, stats: GenerationStats):
        super().__init__(plan, stats)
        # One tool-call parser per streamed choice (None: no tools, or tool_choice "none").
        self._parsers = [self._new_parser() for _ in range(plan.num_choices)]
        self._called = [False] * plan.num_choices

    def _new_parser(self) -> ToolCallParser | None:
        return parser_for(self.plan.tools) if self.plan.tools is not None else None

    @property
    def _legacy(self) -> bool:
        return self.plan.tools is not None and self.plan.tools.legacy

    def _finish_reason(self, reason: str | None, called: bool) -> str | None:
        # OpenAI's "tool_calls": the turn ended in calls (a cut one stays "length").
        if called and reason == "stop":
            return "function_call" if self._legacy else "tool_calls"
        return reason

    def opening_choices(self) -> list[dict]:
        return [
            _delta_choice(choice, {"role": "assistant", "content": ""})
            for choice in range(self.plan.num_choices)
        ]

    def delta_choice(self, choice: int, chunk: GenerationChunk) -> dict | None:
        wants_logprobs = self.plan.logprobs and chunk.logprobs
        logprobs = chat_logprobs(chunk.logprobs) if wants_logprobs else None
        delta = reasoning_fields(chunk.reasoning) if chunk.reasoning else {}
        parser = self._parsers[choice]
        if parser is None:
            if chunk.text or (wants_logprobs and not delta):
                delta["content"] = chunk.text
        else:
            events = parser.feed(chunk.text)
            if chunk.finish_reason:
                events += parser.finish()
            content, calls = tool_call_deltas(events)
            if content:
                delta["content"] = content
            if calls and self._legacy:
                call = legacy_call_delta(calls)
                if call is not None:
                    delta["function_call"] = call
                    self._called[choice] = True
            elif calls:
                delta["tool_calls"] = calls
                self._called[choice] = True
        if not (delta or wants_logprobs):
            return None
        return _delta_choice(choice, delta, logprobs=logprobs)

    def finish_choice(self, choice: int, chunk: GenerationChunk) -> dict:
        reason = self._finish_reason(chunk.finish_reason, self._called[choice])
        return _delta_choice(choice, {}, finish_reason=reason, stop_reason=chunk.stop_reason)

    def whole_choice(self, choice: int, output: ChoiceOutput) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": output.text, "refusal": None}
        parser = self._new_parser()
        if parser is not None:
            parsed = parser.parse(output.text)
            message["content"] = parsed.content
            if parsed.calls and self._legacy:
                call = parsed.calls[0]  # the old API made one call a turn
                message["function_call"] = {"name": call.name, "arguments": call.arguments}
            elif parsed.calls:
                message["tool_calls"] = tool_calls_json(parsed.calls)
        if self.plan.reasoning is not None:  # a thinking model: its thinking apart, by both names
            message.update(reasoning_fields(output.reasoning_text))
            message["content"] = message["content"] or None
        called = bool(message.get("tool_calls") or message.get("function_call"))
        return {
            "index": choice,
            "message": message,
            "logprobs": chat_logprobs(output.logprobs) if self.plan.logprobs else None,
            "finish_reason": self._finish_reason(output.finish_reason, called),
            "stop_reason": output.stop_reason,
        }
