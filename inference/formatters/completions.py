"""``text_completion`` objects, whole and streamed (the legacy /v1/completions shape)."""

from __future__ import annotations

from typing import Any

from inference.formatters.base import ChoiceFormatter, ChoiceOutput
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.transport import GenerationChunk, TokenLogprob


def completion_logprobs(entries: list[TokenLogprob], *, text_offset: int) -> dict[str, Any]:
    """Per-token logprobs in the legacy completions format; offsets count characters."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for entry in entries:
        tokens.append(entry.token)
        token_logprobs.append(entry.logprob)
        top_logprobs.append({text: logprob for _token_id, text, logprob in entry.top})
        offsets.append(text_offset)
        text_offset += len(entry.token)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def _choice(index: int, text: str, *, logprobs=None, finish_reason=None, stop_reason=None):
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


class CompletionFormatter(ChoiceFormatter):
    object_name = "text_completion"
    chunk_object_name = "text_completion"

    def __init__(self, plan: GenerationPlan, stats: GenerationStats):
        super().__init__(plan, stats)
        # Characters streamed so far per choice: logprobs' text_offset counts from the echo.
        self._text_offsets = [0] * plan.num_choices

    def _prompt_text(self, choice: int) -> str:
        return self.plan.prompts[choice // self.plan.n][0] if self.plan.echo else ""

    def opening_choices(self) -> list[dict]:
        if not self.plan.echo:
            return []
        choices = []
        for choice in range(self.plan.num_choices):
            text = self._prompt_text(choice)
            self._text_offsets[choice] = len(text)
            choices.append(_choice(choice, text))
        return choices

    def delta_choice(self, choice: int, chunk: GenerationChunk) -> dict | None:
        wants_logprobs = self.plan.logprobs and chunk.logprobs
        if not (chunk.text or wants_logprobs):
            return None
        logprobs = None
        if wants_logprobs:
            logprobs = completion_logprobs(chunk.logprobs, text_offset=self._text_offsets[choice])
        self._text_offsets[choice] += len(chunk.text)
        return _choice(choice, chunk.text, logprobs=logprobs)

    def finish_choice(self, choice: int, chunk: GenerationChunk) -> dict:
        return _choice(choice, "", finish_reason=chunk.finish_reason, stop_reason=chunk.stop_reason)

    def whole_choice(self, choice: int, output: ChoiceOutput) -> dict:
        prefix = self._prompt_text(choice)
        logprobs = None
        if self.plan.logprobs:
            logprobs = completion_logprobs(output.logprobs, text_offset=len(prefix))
        return _choice(
            choice,
            prefix + output.text,
            logprobs=logprobs,
            finish_reason=output.finish_reason,
            stop_reason=output.stop_reason,
        )
