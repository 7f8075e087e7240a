"""What one scheduler step decided, handed to the model runner and back to the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.block_table import BlockTableRows
    from engine.request import Request
    from engine.spec_decode.speculator import DraftOutcome


@dataclass(slots=True)
class SchedulerOutput:
    """Everything the model runner and the engine need from one step, so neither asks the
    scheduler.

    ``new_requests`` start (or restart after preemption) this step; ``running_requests`` were
    already running and continue a prefill or decode. ``num_scheduled_tokens`` and
    ``block_tables`` (the KV block ids each holds, valid for this step) cover both;
    ``block_rows``, where set, holds the same ids as rows of one array (the KV cache
    manager's), from which the runner gathers the step's tables.
    ``dropped_requests`` were waiting and ended as aborted without running, because their
    adapter was unloaded or their grammar failed to compile (``error``); the engine reports
    them.
    """

    new_requests: list[Request] = field(default_factory=list)
    running_requests: list[Request] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    preempted_requests: list[Request] = field(default_factory=list)
    block_tables: dict[str, list[int]] = field(default_factory=dict)
    block_rows: BlockTableRows | None = None
    dropped_requests: list[Request] = field(default_factory=list)

    @property
    def scheduled_requests(self) -> list[Request]:
        return self.running_requests + self.new_requests

    @property
    def is_empty(self) -> bool:
        return self.total_num_scheduled_tokens == 0

    def summary(self) -> str:
        return (
            f"{self.total_num_scheduled_tokens} tokens: {len(self.running_requests)} running, "
            f"{len(self.new_requests)} new, {len(self.preempted_requests)} preempted"
        )


# A sampled token id saying that the request's constraints allowed no token at all this step
# (engine/core/output_tokens.py ends the request with the client's error).
NO_TOKEN = -1


@dataclass(slots=True)
class ModelRunnerOutput:
    """Per request that reached the end of its known tokens: the sampled token and logprobs.

    Requests in the middle of a chunked prefill sample nothing and do not appear here. A
    request that verified draft tokens also has its ``draft_outcomes`` entry: the drafts it
    accepted, emitted before its sampled token.
    """

    sampled_token_ids: dict[str, int] = field(default_factory=dict)
    logprobs: dict[str, object] = field(default_factory=dict)  # request id -> TokenLogprobs
    prompt_logprobs: dict[str, list] = field(default_factory=dict)  # request id -> new entries
    draft_outcomes: dict[str, DraftOutcome] = field(default_factory=dict)
