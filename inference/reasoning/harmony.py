"""gpt-oss's harmony format: the reply is messages on channels.

    <|channel|>analysis<|message|>The user asks for 2+2. Easy.<|end|>
    <|start|>assistant<|channel|>final<|message|>4<|return|>

``analysis`` is the thinking; ``final`` (and ``commentary`` without a recipient: a preamble
the user may see) is the answer. A ``commentary`` message addressed to a function
(``to=functions.get_weather ... <|message|>{json}<|call|>``) is a tool call: it is handed to
the answer as a Hermes ``<tool_call>`` block, which the tool-call parser reads like any other
(gpt-oss models keep the default Hermes tool parser). The markers are special tokens, so a
model with this parser is detokenized with them kept (planning turns skip_special_tokens
off); none of them reaches the client. Text before any header is answer text.
"""

from __future__ import annotations

import json
import re

from inference.reasoning.base import ReasoningParser, Split, held_back

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>")
MARKERS = (START, CHANNEL, MESSAGE, *ENDS)
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=functions\.([^\s<]+)")


class HarmonyParser(ReasoningParser):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._buffer = ""
        # "header" (before <|message|>), "body" (a message's text), "raw" (no headers at all).
        self._state = "header"
        self._channel = "analysis" if self.starts_in_reasoning else ""
        if self.starts_in_reasoning:
            self._state = "body"
        self._recipient: str | None = None
        self._call: list[str] = []  # a tool call's arguments, emitted when its message ends

    @property
    def in_reasoning(self) -> bool:
        return self._state == "body" and self._channel == "analysis"

    def _body(self, text: str) -> Split:
        if self._recipient is not None:
            self._call.append(text)
            return Split()
        if self._channel == "analysis":
            return Split(reasoning=text)
        return Split(content=text)

    def _end_message(self) -> Split:
        out = Split()
        if self._recipient is not None:
            arguments = "".join(self._call).strip() or "{}"
            block = f'{{"name": {json.dumps(self._recipient)}, "arguments": {arguments}}}'
            out = Split(content=f"<tool_call>\n{block}\n</tool_call>")
        self._state, self._channel, self._recipient, self._call = "header", "", None, []
        return out

    def feed(self, text: str) -> Split:
        self._buffer += text
        out = Split()
        while self._buffer:
            if self._state == "raw":
                out += Split(content=self._buffer)
                self._buffer = ""
            elif self._state == "header":
                head = self._buffer.lstrip()
                if not head.startswith((START, CHANNEL)):
                    if head and not (START.startswith(head) or CHANNEL.startswith(head)):
                        self._state = "raw"  # not a harmony header: plain answer text
                        continue
                    break
                end = self._buffer.find(MESSAGE)
                if end < 0:
                    break
                header = self._buffer[:end]
                channel = _CHANNEL_NAME.search(header)
                recipient = _RECIPIENT.search(header)
                self._channel = channel.group(1) if channel else "final"
                self._recipient = recipient.group(1) if recipient else None
                self._state, self._buffer = "body", self._buffer[end + len(MESSAGE) :]
            else:
                ends = [(self._buffer.find(m), m) for m in (*ENDS, START)]
                found = [(i, m) for i, m in ends if i >= 0]
                if found:
                    index, marker = min(found)
                    out += self._body(self._buffer[:index])
                    out += self._end_message()
                    # <|start|> opens the next message's header: keep it there.
                    skip = 0 if marker == START else len(marker)
                    self._buffer = self._buffer[index + skip :]
                    continue
                keep = held_back(self._buffer, MARKERS)
                out += self._body(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep :]
                break
        return out

    def finish(self) -> Split:
        buffer, self._buffer = self._buffer, ""
        if self._state == "raw":
            return Split(content=buffer)
        if self._state == "body":  # cut inside a message (max_tokens): what it had so far
            return self._body(buffer) + self._end_message()
        return Split()  # a header never finished is markup, not text
