"""``<think>...</think>`` (Qwen3, QwQ, DeepSeek-R1 and their distillations).

    <think>
    The user wants the weather; I should call the tool.
    </think>

    <tool_call>{"name": "get_weather", ...}</tool_call>

The opening tag counts only at the very start of the output (after whitespace): a ``<think>``
later in an answer is text the model wrote. Templates that end the generation prompt with
``<think>`` (Qwen3 thinking-2507, QwQ, DeepSeek-R1 0528) make the output start inside the
thinking, with only ``</think>`` to come; planning says so (``starts_in_reasoning``). Output
cut by ``max_tokens`` before ``</think>`` is all thinking and no answer. The newlines around
the tags are formatting and dropped from both parts.
"""

from __future__ import annotations

from inference.reasoning.base import ReasoningParser, Split, held_back

OPEN, CLOSE = "<think>", "</think>"


class ThinkParser(ReasoningParser):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # "start": may still open with <think>; "reasoning"; "answer_start": after </think>,
        # before the answer's first visible character; "answer".
        self._state = "reasoning" if self.starts_in_reasoning else "start"
        self._buffer = ""
        self._reasoning_started = False  # leading newlines of the thinking are dropped
        self._spaces = ""  # trailing whitespace of the thinking, held until more follows

    @property
    def in_reasoning(self) -> bool:
        return self._state == "reasoning"

    def _reasoning(self, text: str) -> str:
        if not self._reasoning_started:
            text = text.lstrip()
            self._reasoning_started = bool(text)
        text = self._spaces + text
        body = text.rstrip()
        self._spaces = text[len(body) :]
        return body

    def feed(self, text: str) -> Split:
        self._buffer += text
        reasoning: list[str] = []
        content: list[str] = []
        while self._buffer:
            if self._state == "start":
                head = self._buffer.lstrip()
                if head.startswith(OPEN):
                    self._state, self._buffer = "reasoning", head[len(OPEN) :]
                    continue
                if OPEN.startswith(head):  # whitespace, or "<thi" so far: cannot tell yet
                    break
                self._state = "answer"
            elif self._state == "reasoning":
                end = self._buffer.find(CLOSE)
                if end >= 0:
                    reasoning.append(self._reasoning(self._buffer[:end]))
                    self._spaces = ""
                    self._state, self._buffer = "answer_start", self._buffer[end + len(CLOSE) :]
                    continue
                keep = held_back(self._buffer, (CLOSE,))
                reasoning.append(self._reasoning(self._buffer[: len(self._buffer) - keep]))
                self._buffer = self._buffer[len(self._buffer) - keep :]
                break
            elif self._state == "answer_start":
                self._buffer = self._buffer.lstrip()
                if self._buffer:
                    self._state = "answer"
            else:
                content.append(self._buffer)
                self._buffer = ""
        return Split("".join(reasoning), "".join(content))

    def finish(self) -> Split:
        buffer, self._buffer = self._buffer, ""
        if self._state == "reasoning":  # cut before </think>: a partial tag is thinking text
            return Split(self._reasoning(buffer), "")
        return Split("", buffer)  # "start": only whitespace, or "<thi" that never became a tag
