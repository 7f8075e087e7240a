"""What the engine hands back: per-step deltas, engine stats, and the offline API's outputs."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from engine import protocol

if TYPE_CHECKING:
    from engine.request import Request

FinishReason = Literal["stop", "length", "abort"]


@dataclass(slots=True)
class TokenLogprobs:
    """Logprob of one chosen token, and the ``top`` most likely tokens at that position.

    Logprobs are those of the model's raw distribution (log_softmax of the logits, before
    penalties and temperature), as vLLM reports by default. ``rank`` is 1 for the argmax.
    """

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(slots=True)
class RequestTimestamps:
    """Engine-side times of one request, all ``time.monotonic()`` seconds (None until reached)."""

    arrival: float | None = None
    queued: float | None = None
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None

    def copy(self) -> RequestTimestamps:
        # Every delta of every step takes one: the constructor costs a fifth of copy.copy.
        return RequestTimestamps(
            self.arrival, self.queued, self.scheduled, self.first_token, self.last_token
        )


@dataclass(slots=True)
class RequestOutputDelta:
    """New tokens of one sample of one request since its previous delta.

    A request appears in ``LLMEngine.step()``'s result when it produced tokens or finished in
    that step (abort included). ``prompt_logprobs`` (one entry per prompt token, None for the
    first) comes on the first delta only.
    """

    request_id: str
    index: int
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprobs] | None
    prompt_logprobs: list[TokenLogprobs | None] | None
    finished: bool
    finish_reason: FinishReason | None
    stop_reason: int | None
    num_prompt_tokens: int
    num_cached_tokens: int
    timestamps: RequestTimestamps | None  # the engine's timings: on the last delta only
    error: str = ""  # set when the engine ended the request itself (a grammar that failed)
    error_code: str = ""  # with ``error``, when it was the request's own doing (Request)
    # Tokens of this sample delivered so far, this delta's included (resumed ones excepted).
    num_sent_tokens: int = 0
    # Speculative decoding of this sample so far: draft tokens verified, and accepted.
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def to_message(self) -> protocol.RequestDelta:
        """The delta as it crosses Redis; the engine's timings go on the last one only."""
        ts = self.timestamps
        done = self.finished and ts is not None
        return protocol.RequestDelta(
            request_id=self.request_id,
            index=self.index,
            new_token_ids=list(self.new_token_ids),
            logprobs=None if self.new_logprobs is None else [_wire(x) for x in self.new_logprobs],
            prompt_logprobs=None
            if self.prompt_logprobs is None
            else [None if x is None else _wire(x) for x in self.prompt_logprobs],
            finish_reason=self.finish_reason if self.finished else None,
            stop_reason=self.stop_reason,
            num_prompt_tokens=self.num_prompt_tokens,
            num_cached_tokens=self.num_cached_tokens,
            error=self.error,
            error_code=self.error_code,
            num_output_tokens=self.num_sent_tokens,
            num_draft_tokens=self.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens,
            queue_time=_interval(ts.queued, ts.scheduled) if done else None,
            prefill_time=_interval(ts.scheduled, ts.first_token) if done else None,
            decode_time=_interval(ts.first_token, ts.last_token) if done else None,
        )


def _wire(lp: TokenLogprobs) -> protocol.TokenLogprob:
    return protocol.TokenLogprob(
        lp.token_id, lp.logprob, [t for t, _ in lp.top], [v for _, v in lp.top], lp.rank
    )


def _interval(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


@dataclass(slots=True)
class EngineStats:
    """What an engine reports of itself; the fields have EngineStatus's names, so the service's
    status record takes them as they are."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_free_blocks: int
    num_total_blocks: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    max_num_seqs: int
    # Adapters of running and waiting requests, and the adapter slots: what vLLM exports as
    # vllm:lora_requests_info (LLMEngine.lora_requests_info).
    running_lora_adapters: list[str]
    waiting_lora_adapters: list[str]
    max_lora: int
    # Speculative decoding totals (what vLLM exports as vllm:spec_decode_*).
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    # Steps run inside a paused step for a tenant back from idle (engine/core/step_preemption.py).
    num_steps_inside: int = 0


class Throughput:
    """Generated tokens per second over the last ``window_s`` seconds, from the running total
    (``EngineStats.generation_tokens_total``) sampled at each call: an idle engine's rate falls
    to zero as the window passes, steps or no steps."""

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def rate(self, total: int) -> float:
        now, samples = time.monotonic(), self._samples
        samples.append((now, total))
        while len(samples) > 2 and now - samples[0][0] > self.window_s:
            samples.popleft()
        return (samples[-1][1] - samples[0][1]) / max(now - samples[0][0], 1e-9)


@dataclass(slots=True)
class CompletionOutput:
    """One sample of an offline request, shaped like vLLM's ``CompletionOutput``."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, float]] | None
    finish_reason: FinishReason | None
    stop_reason: int | str | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    """All samples of one offline request, shaped like vLLM's ``RequestOutput``."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[int, float] | None] | None
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int


def take_delta(request: Request) -> RequestOutputDelta:
    """What ``request`` has to report since its last delta (new tokens and logprobs, prompt
    logprobs once, whether it finished), marking it delivered. The engine's timings go on the
    last delta only, the one ``to_message`` reads them from: every running request takes a
    delta every step."""
    num_delivered = request.num_delivered_tokens
    new_tokens = request.output_token_ids[num_delivered:]
    num_delivered += len(new_tokens)
    request.num_delivered_tokens = num_delivered
    new_logprobs = None
    if request.pending_logprobs is not None:
        new_logprobs, request.pending_logprobs = request.pending_logprobs, []
    prompt_logprobs = None
    if request.prompt_logprobs is not None and not request.prompt_logprobs_delivered:
        prompt_logprobs = request.prompt_logprobs
        request.prompt_logprobs_delivered = True
    spec = request.spec
    finish_reason = request.status.finish_reason
    finished = finish_reason is not None
    return RequestOutputDelta(
        request_id=request.external_id,
        index=request.index,
        new_token_ids=new_tokens,
        new_logprobs=new_logprobs,
        prompt_logprobs=prompt_logprobs,
        finished=finished,
        finish_reason=finish_reason,
        stop_reason=request.stop_reason,
        num_prompt_tokens=request.num_prompt_tokens,
        num_cached_tokens=max(request.num_cached_tokens, 0),
        timestamps=request.timestamps.copy() if finished else None,
        error=request.error,
        error_code=request.error_code,
        num_sent_tokens=num_delivered - request.num_resumed_tokens,
        num_draft_tokens=spec.num_draft_tokens if spec is not None else 0,
        num_accepted_tokens=spec.num_accepted_tokens if spec is not None else 0,
    )
