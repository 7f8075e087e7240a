"""Protocol messages <-> engine objects: the only place that knows both shapes."""

from __future__ import annotations

import msgspec

from engine import protocol
from engine.outputs import RequestOutputDelta, TokenLogprobs
from engine.sampling_params import SamplingParams


def sampling_params(options: protocol.SamplingOptions) -> SamplingParams:
    """Raises ValueError with SamplingParams' message for values the engine refuses."""
    fields = msgspec.structs.asdict(options)
    fields["stop_token_ids"] = list(fields["stop_token_ids"])
    return SamplingParams(**fields)


def _logprob(lp: TokenLogprobs) -> protocol.TokenLogprob:
    return protocol.TokenLogprob(
        lp.token_id, lp.logprob, [t for t, _ in lp.top], [v for _, v in lp.top]
    )


def _interval(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def request_delta(delta: RequestOutputDelta) -> protocol.RequestDelta:
    ts = delta.timestamps
    done = delta.finished and ts is not None
    return protocol.RequestDelta(
        request_id=delta.request_id,
        index=delta.index,
        new_token_ids=list(delta.new_token_ids),
        logprobs=None if delta.new_logprobs is None else [_logprob(x) for x in delta.new_logprobs],
        prompt_logprobs=None
        if delta.prompt_logprobs is None
        else [None if x is None else _logprob(x) for x in delta.prompt_logprobs],
        finish_reason=delta.finish_reason if delta.finished else None,
        stop_reason=delta.stop_reason,
        num_prompt_tokens=delta.num_prompt_tokens,
        num_cached_tokens=delta.num_cached_tokens,
        error=delta.error,
        queue_time=_interval(ts.queued, ts.scheduled) if done else None,
        prefill_time=_interval(ts.scheduled, ts.first_token) if done else None,
        decode_time=_interval(ts.first_token, ts.last_token) if done else None,
    )
