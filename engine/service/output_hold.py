"""Outputs held back for requests read only whole (``GenerateRequest.stream_outputs`` False).

A non-streaming request's client gets nothing before the end, yet the engine used to publish
its every step, and the API woke once a step per request to pass each token through its output
chain only to keep it: under a flood of non-streaming completions that chain was a fifth of
the API process's CPU (yappi, 128 completions of 16 tokens at a time, 2026-11-28). So after a
request's first delta, which goes at once (its time to first token, the ``started`` record and
the frontend's tenant queue all wait on it), the loop merges each sample's later deltas here
and publishes them as one when the sample finishes, fails or is aborted, or once FLUSH_S has
passed since the first delta held: the frontend hears from a running request often enough
that its silence timeout never mistakes it for a lost one, and a failover resumes from at most
that far back (the replacement recomputes what was held, which no client had seen).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from engine.protocol import RequestDelta

FLUSH_S = 1.0


def merged(earlier: RequestDelta, later: RequestDelta) -> RequestDelta:
    """One delta for two consecutive ones of a sample: the tokens (and logprobs) of both, the
    rest as the later one says (its counts are cumulative, its finish and timings final)."""
    # Extended in place: a sample held for a second gains a token a step, and copying what it
    # holds at every step would cost the square of that (its logprobs alike).
    earlier.new_token_ids.extend(later.new_token_ids)
    later.new_token_ids = earlier.new_token_ids
    if earlier.logprobs is not None:
        earlier.logprobs.extend(later.logprobs or [])
        later.logprobs = earlier.logprobs
    if later.prompt_logprobs is None:
        later.prompt_logprobs = earlier.prompt_logprobs
    return later


class OutputHold:
    """Held deltas per (request id, sample index), with the frontend each goes to."""

    def __init__(self, flush_s: float = FLUSH_S, clock: Callable[[], float] = time.monotonic):
        self.flush_s, self.clock = flush_s, clock
        # (request id, index) -> (frontend id, merged delta, when the first of them was held)
        self._held: dict[tuple[str, int], tuple[str, RequestDelta, float]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def take(self, frontend_id: str, delta: RequestDelta) -> RequestDelta | None:
        """What to publish now for ``delta``: None while it is held, else the delta merged
        with what was held before it."""
        key = (delta.request_id, delta.index)
        held = self._held.pop(key, None)
        if held is not None:
            delta, since = merged(held[1], delta), held[2]
        else:
            since = self.clock()
        if delta.finish_reason is not None or delta.error:
            return delta
        self._held[key] = (frontend_id, delta, since)
        return None

    def due(self) -> list[tuple[str, RequestDelta]]:
        """(frontend id, delta) of every sample held for FLUSH_S or longer, released."""
        if not self._held:
            return []
        cutoff = self.clock() - self.flush_s
        keys = [key for key, (_, _, since) in self._held.items() if since <= cutoff]
        return [self._held.pop(key)[:2] for key in keys]

    def discard(self, request_ids: Iterable[str]) -> None:
        """Forget what is held for requests that ended otherwise (aborted, failed here)."""
        ended = set(request_ids)
        if ended and self._held:
            self._held = {key: v for key, v in self._held.items() if key[0] not in ended}
