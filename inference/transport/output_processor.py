"""Engine deltas -> client-ready chunks: the API-side half of vLLM V1's OutputProcessor.

Engines send token ids only. Each sample of a request keeps a ``SampleOutputProcessor``
(``engine/text/sample_output.py``, the one the offline ``LLM`` uses too) for incremental
detokenization and stop strings; this module adds what the API shows: token texts for
logprobs, prompt and cached token counts, and the engine's timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine import protocol
from engine.text.detokenizer import Decoder
from engine.text.sample_output import SampleOutputProcessor

if TYPE_CHECKING:
    from inference.transport.engine_request import EngineRequest

__all__ = ["GenerationChunk", "RequestOutputProcessor", "TokenLogprob", "TokenTexts"]


@dataclass(slots=True)
class TokenLogprob:
    """A token's logprob and its top alternatives as (token_id, text, logprob)."""

    token_id: int
    token: str
    logprob: float | None  # None only for a prompt's first token, which nothing predicts
    top: list[tuple[int, str, float]] = field(default_factory=list)
    rank: int | None = None  # 1 for the most likely token; None where the engine sent none


@dataclass(slots=True)
class GenerationChunk:
    """New output for one sample: text and tokens since the previous chunk of that index."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None
    stop_reason: int | str | None
    prompt_tokens: int
    completion_tokens: int  # cumulative for this index
    cached_tokens: int
    # Each prompt token's logprob (the first one's None) when the request asked for them:
    # on the sample's first chunk only.
    prompt_logprobs: list[TokenLogprob] | None = None
    # Engine-side intervals, on the final chunk of a sample (None when the engine sent none);
    # the queue time includes the wait in the API process for the tenant's turn.
    queue_time: float | None = None
    prefill_time: float | None = None
    decode_time: float | None = None
    # Set by inference/reasoning for models with a reasoning parser: the thinking this chunk
    # carries (``text`` is then the answer only) and how many of its tokens were thinking.
    reasoning: str = ""
    reasoning_tokens: int = 0
    # Speculative decoding of this sample so far: draft tokens verified, and accepted.
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0


class TokenTexts:
    """Token id -> text for logprobs, cached: the same few thousand ids recur constantly."""

    def __init__(self, tokenizer: Decoder):
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            self._cache[token_id] = text
        return text

    def logprob(self, lp: protocol.TokenLogprob) -> TokenLogprob:
        top = [(t, self(t), v) for t, v in zip(lp.top_ids, lp.top_logprobs, strict=False)]
        return TokenLogprob(lp.token_id, self(lp.token_id), lp.logprob, top, lp.rank or None)


class _SampleOutput:
    """One sample's SampleOutputProcessor, its deltas turned into GenerationChunks. It keeps
    no reference to its request (``apply`` is given it): a request and its samples pointing at
    each other would be a cycle, freed only by a full collection once the request is done."""

    def __init__(self, index: int, request: RequestOutputProcessor):
        self.index = index
        output = request.output
        self.processor = SampleOutputProcessor(
            request.tokenizer,
            stop=list(output.stop),
            include_stop_str_in_output=output.include_stop_str_in_output,
            skip_special_tokens=output.skip_special_tokens,
            min_tokens=request.min_tokens,
            prompt_token_ids=request.prompt_token_ids,
        )

    @property
    def finished(self) -> bool:
        return self.processor.finished

    def apply(
        self, delta: protocol.RequestDelta, req: RequestOutputProcessor
    ) -> GenerationChunk | None:
        update = self.processor.update(
            delta.new_token_ids,
            delta.logprobs,
            finish_reason=delta.finish_reason,
            stop_reason=delta.stop_reason,
        )
        if update is None:
            return None
        req.num_prompt_tokens = delta.num_prompt_tokens or req.num_prompt_tokens
        req.num_cached_tokens = max(req.num_cached_tokens, delta.num_cached_tokens)
        logprob = req.token_texts.logprob
        prompt_logprobs = None
        if delta.prompt_logprobs is not None:
            prompt_logprobs = req.prompt_logprobs(delta.prompt_logprobs)
        return GenerationChunk(
            index=self.index,
            text=update.text,
            token_ids=update.token_ids,
            logprobs=None if update.logprobs is None else [logprob(lp) for lp in update.logprobs],
            finish_reason=update.finish_reason,
            stop_reason=update.stop_reason,
            prompt_tokens=req.num_prompt_tokens,
            completion_tokens=self.processor.num_tokens,
            cached_tokens=req.num_cached_tokens,
            prompt_logprobs=prompt_logprobs,
            queue_time=None if delta.queue_time is None else delta.queue_time + req.held_s,
            prefill_time=delta.prefill_time,
            decode_time=delta.decode_time,
            draft_tokens=delta.num_draft_tokens,
            accepted_draft_tokens=delta.num_accepted_tokens,
        )


class RequestOutputProcessor:
    """Turns one engine request's deltas into GenerationChunks, one sample per index (as
    many as the request's ``sampling.n``), with the request's OutputOptions (stop strings).

    ``process`` returns None for a delta that adds nothing (a sample already ended by a stop
    string keeps receiving tokens until the engine sees the abort).
    """

    def __init__(
        self,
        request: EngineRequest,
        tokenizer: Decoder,
        *,
        token_texts: TokenTexts | None = None,
    ):
        sampling = request.message.sampling
        prompt_token_ids = request.message.prompt_token_ids
        self.tokenizer = tokenizer
        self.prompt_token_ids = prompt_token_ids
        self.min_tokens = sampling.min_tokens
        self.output = request.output
        self.token_texts = token_texts or TokenTexts(tokenizer)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_cached_tokens = 0
        # Seconds the request waited in this process for its tenant's turn (tenant_backlog.py):
        # part of its queue time, which the engine counts from when it read the request.
        self.held_s = 0.0
        self.samples = [_SampleOutput(i, self) for i in range(sampling.n)]

    @property
    def num_open(self) -> int:
        return sum(not s.finished for s in self.samples)

    def process(self, delta: protocol.RequestDelta) -> GenerationChunk | None:
        return self.samples[delta.index].apply(delta, self)

    def prompt_logprobs(self, entries: list) -> list[TokenLogprob]:
        """The engine's prompt logprobs (None for the first token) with each token's text."""
        first = self.prompt_token_ids[0]
        return [
            TokenLogprob(first, self.token_texts(first), None)
            if lp is None
            else self.token_texts.logprob(lp)
            for lp in entries
        ]
