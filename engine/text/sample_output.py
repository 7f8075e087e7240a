"""One sample's output processing: incremental detokenization, stop strings and logprobs.

Engines produce token ids only. ``SampleOutputProcessor`` turns one sample's tokens into text
as they arrive and ends the sample at the first stop string (never before ``min_tokens``), the
one implementation that the API processes (``inference/output_processor.py``, per streamed
chunk) and the offline ``LLM`` (``engine/llm.py``, whole outputs) share. Torch-free.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.text.detokenizer import Decoder, IncrementalDetokenizer
from engine.text.stop_strings import StopStringMatcher

L = TypeVar("L")  # a token's logprob record, whatever shape its caller keeps


@dataclass(slots=True)
class SampleUpdate(Generic[L]):
    """What one batch of a sample's tokens added."""

    text: str  # the new text safe to show (held back: a possible stop string's beginning)
    token_ids: list[int]  # the tokens taken: all, or up to the one that completed a stop string
    logprobs: list[L] | None  # the logprobs of ``token_ids``, when the caller gave any
    finish_reason: str | None  # set once, when this update ended the sample
    stop_reason: int | str | None


class SampleOutputProcessor:
    """Feed a sample's tokens in order (``update``); it ends at a stop string or the engine's
    finish, and ignores whatever arrives after that (the engine stops a request only when it
    sees the abort, so a sample cut by a stop string may still receive tokens)."""

    def __init__(
        self,
        tokenizer: Decoder,
        *,
        stop: list[str] | None,
        include_stop_str_in_output: bool,
        skip_special_tokens: bool,
        min_tokens: int,
        prompt_token_ids: Sequence[int] | None = None,
    ):
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self.min_tokens = min_tokens
        # With the prompt's last tokens as context (the API), or none: the text of the tokens
        # decoded on their own (the offline LLM, as vLLM's).
        self._detokenizer = IncrementalDetokenizer(
            tokenizer,
            prompt_token_ids,
            skip_special_tokens=skip_special_tokens,
        )
        self._matcher = StopStringMatcher(
            stop, include_stop_str_in_output=include_stop_str_in_output
        )
        self.num_tokens = 0  # tokens taken so far
        # A stop string ended it among its tokens: the engine may still be running it.
        self.cut_short = False
        self.text_ends: list[int] = []  # detokenized length after each token taken
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def stopped_by_string(self) -> bool:
        return self._matcher.matched is not None

    def update(
        self,
        token_ids: Sequence[int],
        logprobs: Sequence[L] | None = None,
        *,
        finish_reason: str | None = None,
        stop_reason: int | str | None = None,
    ) -> SampleUpdate[L] | None:
        """Take the next tokens (and the engine's finish, if this is the last batch); None once
        the sample has finished."""
        if self.finished:
            return None
        texts: list[str] = []
        taken: list[int] = []
        for token_id in token_ids:
            self.num_tokens += 1
            taken.append(token_id)
            piece = self._detokenizer.push(token_id)
            self.text_ends.append(len(self._detokenizer.text))
            # As vLLM does: no stop string can end generation before min_tokens.
            if self.num_tokens > self.min_tokens:
                texts.append(self._matcher.feed(piece))
            else:
                texts.append(self._matcher.pass_through(piece))
            if self._matcher.matched is not None:
                self.finish_reason, self.stop_reason = "stop", self._matcher.matched
                self.cut_short = True
                break
        if self.finish_reason is None and finish_reason is not None:
            texts.append(self._matcher.feed(self._detokenizer.flush()))
            if self.text_ends:  # the held-back bytes complete the last token's text
                self.text_ends[-1] = len(self._detokenizer.text)
            if self._matcher.matched is not None:
                self.finish_reason, self.stop_reason = "stop", self._matcher.matched
            else:
                texts.append(self._matcher.flush())
                self.finish_reason, self.stop_reason = finish_reason, stop_reason
        return SampleUpdate(
            text="".join(texts),
            token_ids=taken,
            logprobs=None if logprobs is None else list(logprobs[: len(taken)]),
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )

    def num_tokens_reaching(self, token_ids: list[int], text: str) -> int:
        """How many of ``token_ids`` (all taken) the sample's final ``text`` needs: the
        shortest prefix whose text still reaches a stop string's cut."""
        num_kept = bisect.bisect_left(self.text_ends, len(text)) + 1 if text else 0
        # The detokenizer holds back bytes that end mid-character until the next token; when
        # they turn out not to complete one, that next token may lie wholly past the cut.
        while num_kept and self._decode(token_ids[: num_kept - 1]).startswith(text):
            num_kept -= 1
        return num_kept

    def _decode(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids, skip_special_tokens=self._skip_special_tokens)
