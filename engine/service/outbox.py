"""The outbox: the requests this engine answers for, and the PublishJob that gathers one loop
iteration's answers for the writer thread (the inbox's counterpart)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import protocol
from engine.outputs import RequestOutputDelta
from engine.service import convert
from engine.service.redis_io import PublishJob


@dataclass(slots=True)
class ActiveRequest:
    """A request taken from the stream that still has samples to answer."""

    entry_id: str  # XACK-ed with the last sample's last delta
    request: protocol.GenerateRequest
    open_indexes: set[int] = field(default_factory=set)
    # Once it produced output, draining can no longer hand it to another engine.
    started: bool = False
    # Tokens sent per sample: each delta carries the running count, so the frontend can
    # tell a stream that lost outputs in transit from a complete one.
    num_sent: dict[int, int] = field(default_factory=dict)


class Outbox:
    def __init__(self) -> None:
        self.active: dict[str, ActiveRequest] = {}
        self.job = PublishJob()

    def track(self, entry_id: str, request: protocol.GenerateRequest) -> None:
        self.active[request.request_id] = ActiveRequest(
            entry_id, request, open_indexes=set(range(request.sampling.n))
        )

    def add_engine_deltas(self, deltas: list[RequestOutputDelta]) -> None:
        for delta in deltas:
            active = self.active.get(delta.request_id)
            if active is None:  # aborted or failed here already
                continue
            if not active.started:
                active.started = True
                self.job.started[active.entry_id] = protocol.StartedRecord(
                    active.request.request_id, active.request.frontend_id
                )
            message = convert.request_delta(delta)
            sent = active.num_sent.get(delta.index, 0) + len(message.new_token_ids)
            active.num_sent[delta.index] = sent
            message.num_output_tokens = sent
            self.job.add(active.request.frontend_id, message)
            if delta.finished:
                active.open_indexes.discard(delta.index)
                if not active.open_indexes:
                    self._forget(active)

    def abort_open_samples(self, active: ActiveRequest, *, error: str = "") -> None:
        """Answer every sample still open as aborted and stop tracking the request."""
        for index in sorted(active.open_indexes):
            self.job.add(
                active.request.frontend_id,
                protocol.RequestDelta(
                    request_id=active.request.request_id,
                    index=index,
                    finish_reason="abort",
                    error=error,
                ),
            )
        self._forget(active)

    def answer_without_running(
        self,
        entry_id: str,
        request: protocol.GenerateRequest,
        *,
        finish_reason: str = "abort",
        error: str = "",
    ) -> None:
        """Answer a request that never reached the engine (refused, or aborted first)."""
        for index in range(max(1, request.sampling.n)):
            self.job.add(
                request.frontend_id,
                protocol.RequestDelta(
                    request_id=request.request_id,
                    index=index,
                    finish_reason=finish_reason,
                    num_prompt_tokens=len(request.prompt_token_ids),
                    error=error,
                ),
            )
        self.job.done.append(entry_id)

    def hand_back(self, entry_id: str, request: protocol.GenerateRequest) -> None:
        """Put the request back on the stream for another engine (draining)."""
        self.job.requeue.append(request)
        self.job.done.append(entry_id)

    def take_job(self) -> PublishJob | None:
        """The job gathered so far, or None if it is empty; the next one starts afresh."""
        if not self.job:
            return None
        job, self.job = self.job, PublishJob()
        return job

    def _forget(self, active: ActiveRequest) -> None:
        self.active.pop(active.request.request_id, None)
        self.job.done.append(active.entry_id)
