"""``text_completion`` objects, whole and streamed (the legacy /v1/completions shape)."""

from __future__ import annotations

from typing import Any

from inference.formatters.base import ChoiceFormatter, ChoiceOutput
from inference.formatters.prompt_logprobs import prompt_logprobs_entries, with_alternatives
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.transport import GenerationChunk, TokenLogprob


def completion_logprobs(
    entries: list[TokenLogprob], *, text_offset: int, prompt: list[TokenLogprob] = ()
) -> dict[str, Any]:
    """Per-token logprobs in the legacy completions format; offsets count characters. With
    ``prompt`` (echo), the prompt's tokens come first, from offset 0, the first one with null
    logprobs (nothing predicts it); ``text_offset`` is then where the generated text starts."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for start, part in ((0, prompt), (text_offset, entries)):
        for entry in part:
            tokens.append(entry.token)
            token_logprobs.append(entry.logprob)
            top_logprobs.append(
                None
                if entry.logprob is None
                else {text: logprob for _token_id, text, logprob in entry.top}
            )
            offsets.append(start)
            start += len(entry.token)
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
        # Echoes still to stream with the prompt's logprobs, which come with the engine's
        # first output (so the echo waits for it rather than opening the stream).
        self._echo_pending = [plan.prompt_logprobs] * plan.num_choices

    def _prompt_text(self, choice: int) -> str:
        return self.plan.prompts[choice // self.plan.n][0] if self.plan.echo else ""

    def opening_choices(self) -> list[dict]:
        if not self.plan.echo or self.plan.prompt_logprobs:
            return []
        choices = []
        for choice in range(self.plan.num_choices):
            text = self._prompt_text(choice)
            self._text_offsets[choice] = len(text)
            choices.append(_choice(choice, text))
        return choices

    def delta_choice(self, choice: int, chunk: GenerationChunk) -> dict | None:
        # An echo-only request (max_tokens 0) shows nothing of the token made to score it.
        generated = "" if self.plan.echo_only else chunk.text
        wants_logprobs = self.plan.logprobs and not self.plan.echo_only
        entries = (chunk.logprobs or []) if wants_logprobs else []
        echo, prompt = "", []
        if self._echo_pending[choice]:
            self._echo_pending[choice] = False
            echo, prompt = self._prompt_text(choice), chunk.prompt_logprobs or []
            self._text_offsets[choice] = len(echo)
        if not (echo or generated or entries):
            return None
        logprobs = None
        if entries or prompt:
            offset = self._text_offsets[choice]
            logprobs = completion_logprobs(entries, text_offset=offset, prompt=prompt)
        self._text_offsets[choice] += len(generated)
        return _choice(choice, echo + generated, logprobs=logprobs)

    def finish_choice(self, choice: int, chunk: GenerationChunk) -> dict:
        return _choice(choice, "", finish_reason=chunk.finish_reason, stop_reason=chunk.stop_reason)

    def add_prompt_logprobs(
        self, body: dict[str, Any], outputs: list[ChoiceOutput], alternatives: int
    ) -> None:
        n = self.plan.n
        for index, choice in enumerate(body["choices"]):
            # The choices of one prompt share its logprobs, whichever sample carried them.
            first = index - index % n
            group = outputs[first : first + n]
            prompt = next((o.prompt_logprobs for o in group if o.prompt_logprobs), [])
            choice["prompt_logprobs"] = prompt_logprobs_entries(prompt, alternatives)

    def whole_choice(self, choice: int, output: ChoiceOutput) -> dict:
        prefix = self._prompt_text(choice)
        text = "" if self.plan.echo_only else output.text
        logprobs = None
        if self.plan.logprobs:
            prompt = output.prompt_logprobs if self.plan.prompt_logprobs else []
            logprobs = completion_logprobs(
                [] if self.plan.echo_only else output.logprobs,
                text_offset=len(prefix),
                prompt=with_alternatives(prompt, self.plan.sampling.logprobs or 0),
            )
        return _choice(
            choice,
            prefix + text,
            logprobs=logprobs,
            finish_reason=output.finish_reason,
            stop_reason=output.stop_reason,
        )
