"""Is a request's stream of outputs whole? A guard against outputs lost in transit.

Engines never drop an output (they retry until Redis takes it), but a Redis that restarts
without its last writes (no persistence, or the second an append-only file had not yet
synced) can lose a few stream entries. Each delta carries the number of tokens its engine
request has sent so far (``num_output_tokens``); a frontend that counts fewer has missed some
and must end the request with an error: a normal finish with tokens missing is never allowed.
"""

from __future__ import annotations

from engine import protocol

LOST_MESSAGE = (
    "part of this request's output was lost in transit (Redis restarted without it); retry it"
)


class OutputContinuity:
    """Tokens received per (engine request id, sample index), checked against each delta."""

    def __init__(self) -> None:
        self._received: dict[tuple[str, int], int] = {}

    def intact(self, delta: protocol.RequestDelta) -> bool:
        """Count ``delta``'s tokens; False when its engine says more were sent than arrived."""
        key = (delta.request_id, delta.index)
        received = self._received.get(key, 0) + len(delta.new_token_ids)
        self._received[key] = received
        return not delta.num_output_tokens or delta.num_output_tokens == received
