"""``chat.completion`` objects and ``chat.completion.chunk`` stream chunks."""

from __future__ import annotations

from typing import Any

from inference.formatters.base import ChoiceOutput, ResponseFormatter
from inference.output_processor import GenerationChunk, TokenLogprob


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


class ChatFormatter(ResponseFormatter):
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"

    def opening_choices(self) -> list[dict]:
        return [
            _delta_choice(choice, {"role": "assistant", "content": ""})
            for choice in range(self.plan.num_choices)
        ]

    def delta_choice(self, choice: int, chunk: GenerationChunk) -> dict | None:
        wants_logprobs = self.plan.logprobs and chunk.logprobs
        if not (chunk.text or wants_logprobs):
            return None
        logprobs = chat_logprobs(chunk.logprobs) if wants_logprobs else None
        return _delta_choice(choice, {"content": chunk.text}, logprobs=logprobs)

    def finish_choice(self, choice: int, chunk: GenerationChunk) -> dict:
        return _delta_choice(
            choice, {}, finish_reason=chunk.finish_reason, stop_reason=chunk.stop_reason
        )

    def whole_choice(self, choice: int, output: ChoiceOutput) -> dict:
        return {
            "index": choice,
            "message": {"role": "assistant", "content": output.text, "refusal": None},
            "logprobs": chat_logprobs(output.logprobs) if self.plan.logprobs else None,
            "finish_reason": output.finish_reason,
            "stop_reason": output.stop_reason,
        }
