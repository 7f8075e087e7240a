"""Request state inside the engine: status enum, token lists, progress counters.

One ``Request`` is one sequence. A user request with ``n`` samples becomes ``n`` Requests that
share the user's id and differ by ``index``.
"""

from __future__ import annotations

import enum
import time
from typing import TYPE_CHECKING

from engine.outputs import FinishReason, RequestTimestamps, TokenLogprobs

if TYPE_CHECKING:
    from engine.adapters import AdapterIdentity
    from engine.core.block_hash import PublicPrefix
    from engine.sampling_params import SamplingParams
    from engine.spec_decode import SpecState
    from engine.structured.state import GrammarState


class RequestStatus(enum.IntEnum):
    """Ordered: every finished state sorts after every live one, so ``is_finished`` is one test."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED

    @property
    def finish_reason(self) -> FinishReason | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS: dict[RequestStatus, FinishReason] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


class Request:
    __slots__ = (
        "adapter",
        "all_token_ids",
        "block_hashes",
        "cache_salt",
        "error",
        "error_code",
        "external_id",
        "grammar",
        "index",
        "max_tokens",
        "num_cached_tokens",
        "num_charged_tokens",
        "num_computed_tokens",
        "num_delivered_tokens",
        "num_pending_tokens",
        "num_prompt_tokens",
        "num_resumed_tokens",
        "output_counts",
        "output_token_ids",
        "pending_logprobs",
        "priority",
        "prompt_logprobs",
        "prompt_logprobs_delivered",
        "prompt_token_set",
        "public_prefix",
        "request_id",
        "rides",
        "sampling_params",
        "service_class",
        "spec",
        "status",
        "stop_reason",
        "tenant",
        "timestamps",
        "weight",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        *,
        max_tokens: int,
        external_id: str | None = None,
        index: int = 0,
        cache_salt: str | None = None,
        adapter: AdapterIdentity | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        public_prefix: PublicPrefix | None = None,
        tenant: str = "",
        weight: float = 1.0,
        service_class: int = 0,
    ) -> None:
        self.request_id = request_id
        self.external_id = external_id if external_id is not None else request_id
        self.index = index
        self.sampling_params = sampling_params
        self.max_tokens = max_tokens
        self.cache_salt = cache_salt
        # A declared shared prefix the prompt starts with (engine/core/block_hash.py), or None.
        self.public_prefix = public_prefix
        self.adapter = adapter
        self.priority = priority
        # Fair share (engine/core/fair_share.py): an opaque tenant id, its weight, the rank of
        # its service class (0 interactive, 1 batch), and the tokens charged to the tenant.
        self.tenant = tenant
        self.weight = weight
        self.service_class = service_class
        self.num_charged_tokens = 0
        self.num_prompt_tokens = len(prompt_token_ids)
        self.all_token_ids: list[int] = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        # The prompt's distinct token ids, made by the sampler when a penalty first needs them
        # (engine/sample/penalties.py).
        self.prompt_token_set = None
        # The output's distinct token ids and counts, kept up to date by the sampler while a
        # penalty needs them (engine/sample/penalties.py).
        self.output_counts = None
        self.num_computed_tokens = 0
        # Tokens sampled by steps still on the device (engine/async_steps.py): counted in
        # num_computed_tokens already, appended once a step's results are read. At most 2:
        # the next step is queued before the one in flight is read.
        self.num_pending_tokens = 0
        # -1 until first scheduled: then the prompt tokens found in the prefix cache.
        self.num_cached_tokens = -1
        self.num_delivered_tokens = 0
        self.num_resumed_tokens = 0  # delivered by an engine that died (engine/resume.py)
        self.status = RequestStatus.WAITING
        # Admitted inside another step (engine/core/step_preemption.py): it rides in a seat
        # beyond max_num_seqs until it finishes or is preempted.
        self.rides = False
        self.stop_reason: int | None = None
        self.block_hashes: list[bytes] = []
        self.pending_logprobs: list[TokenLogprobs] | None = (
            [] if sampling_params.logprobs is not None else None
        )
        self.prompt_logprobs: list[TokenLogprobs | None] | None = (
            [None] if sampling_params.prompt_logprobs is not None else None
        )
        self.prompt_logprobs_delivered = False
        # Structured outputs: the sample's grammar state (engine/structured/), None if free.
        self.grammar: GrammarState | None = None
        self.error = ""  # why the engine ended the request, reported with its last delta
        # Set when that was the request's own doing (its constraints allow no token): the
        # OpenAI error code the API answers with, as the client's error rather than a failure.
        self.error_code = ""
        # Speculative decoding (engine/spec_decode/): drafts, backoff and counts; None: off.
        self.spec: SpecState | None = None
        now = time.monotonic()
        self.timestamps = RequestTimestamps(arrival=arrival_time if arrival_time else now)

    # The sampler's row of a request ends with no drafts (a DraftRow's may: spec_decode/verify.py).
    row_drafts = ()

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.all_token_ids[: self.num_prompt_tokens]

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    @property
    def has_prompt_work(self) -> bool:
        """More than one token left to compute: a prompt chunk (or a preempted request's
        recomputation), not a decode."""
        return self.num_tokens - self.num_computed_tokens > 1

    @property
    def is_prefill_done(self) -> bool:
        return self.num_computed_tokens >= self.num_prompt_tokens

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, "
            f"tokens={self.num_tokens}, computed={self.num_computed_tokens})"
        )
