"""What a generation is, once planned (GenerationPlan), and what it did (GenerationStats)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from controlplane.adapters.selectors import AdapterRoute
from engine.protocol import AdapterRef, SamplingOptions
from inference.generation.shared_prefixes import SharedPrefixMatch
from inference.reasoning import ReasoningSetup
from inference.tools import ToolSetup
from inference.transport import EngineRequest, GenerationChunk, OutputOptions

if TYPE_CHECKING:
    from inference.chat_store.context import ChatStoreContext
    from inference.responses.context import ResponseContext

Kind = Literal["chat", "completion", "response", "messages"]


def service_tier_of(service_class: str) -> str:
    """The batch class behind every interactive request is what OpenAI calls "flex"."""
    return "flex" if service_class == "batch" else "default"


@dataclass
class GenerationPlan:
    """Everything decided before the engine sees the request."""

    kind: Kind
    model: str
    request_id: str
    prompts: list[tuple[str, list[int]]]
    sampling: SamplingOptions
    cache_salt: str
    tenant: str
    # The base model whose engines run the request ("" : ``model`` itself) and, for a LoRA
    # adapter, its route (name, checksum, path).
    engine_model: str = ""
    adapter: AdapterRoute | None = None
    # Stop strings and how text shows: what the API applies to the engines' tokens.
    output: OutputOptions = field(default_factory=OutputOptions)
    priority: int = 0
    # The request's ``user``: the client's end user, recorded with the usage; and the field
    # that named it (``safety_identifier`` or ``user``), for the param of their refusals.
    end_user: str = ""
    end_user_param: str = "user"
    # Fair share in the engines: the tenant's opaque id, weight and class (Principal).
    engine_tenant: str = ""
    share_weight: float = 1.0
    # "batch": the tenant's class, or the request's service_tier "flex", or a Batch API line.
    service_class: str = "interactive"
    logprobs: bool = False
    echo: bool = False
    # Completions with echo and logprobs: the prompt's tokens lead each choice's logprobs;
    # ``echo_only`` (max_tokens 0): the prompt scored, and the one token the engine made
    # to get there left out of the answer and its usage.
    prompt_logprobs: bool = False
    echo_only: bool = False
    # vLLM's prompt_logprobs field: how many alternatives each prompt token's entry of the
    # answer's ``prompt_logprobs`` lists; None: not asked.
    prompt_logprobs_field: int | None = None
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    # A chat request's tools and how calls are made (inference/tools); None: no tools.
    tools: ToolSetup | None = None
    # A Responses API request (kind "response"): what its Response object echoes and stores.
    response: ResponseContext | None = None
    # A chat request with ``store: true``: where its finished completion is kept.
    chat_store: ChatStoreContext | None = None
    # Per prompt, the declared shared prefix it starts with (inference/generation/
    # shared_prefixes.py), or None; empty: none matched.
    shared_prefixes: list[SharedPrefixMatch | None] = field(default_factory=list)
    # How the model's thinking is told from its answer (inference/reasoning); None: it is not.
    reasoning: ReasoningSetup | None = None

    @property
    def n(self) -> int:
        return self.sampling.n

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def reads_outputs_whole(self) -> bool:
        """Nothing is sent before the end and no stop string is matched on the way: the
        engines may hold the tokens after the first and send them together
        (``GenerateRequest.stream_outputs``, engine/service/output_hold.py)."""
        return not self.stream and not self.output.stop

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for _text, ids in self.prompts)

    @property
    def service_tier(self) -> str:
        """OpenAI's name for how the request was processed (the answer's ``service_tier``)."""
        return service_tier_of(self.service_class)

    def engine_requests(self) -> list[EngineRequest]:
        """One engine request per prompt: the only place the API builds them."""
        route = self.adapter
        adapter = None
        if route is not None:  # the catalog's route, as the engines know an adapter
            adapter = AdapterRef(name=route.name, checksum=route.checksum, path=route.path)
        single = len(self.prompts) == 1
        shared = self.shared_prefixes or [None] * len(self.prompts)
        return [
            EngineRequest.build(
                model=self.engine_model or self.model,
                request_id=self.request_id if single else f"{self.request_id}-{index}",
                prompt_token_ids=token_ids,
                sampling=self.sampling,
                adapter=adapter,
                cache_salt=self.cache_salt,
                tenant=self.engine_tenant,
                weight=self.share_weight,
                service_class=self.service_class,
                priority=self.priority,
                output=self.output,
                shared_prefix_salt=shared[index].salt if shared[index] else "",
                shared_prefix_tokens=shared[index].num_tokens if shared[index] else 0,
                stream_outputs=not self.reads_outputs_whole,
            )
            for index, (_text, token_ids) in enumerate(self.prompts)
        ]


@dataclass
class GenerationStats:
    """What settlement records once the request ends (usage and metrics)."""

    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    completion_tokens: dict[int, int] = field(default_factory=dict)
    cached_tokens: dict[int, int] = field(default_factory=dict)
    finish_reason: str | None = None
    # Gaps between consecutive token arrivals of each choice (vllm:inter_token_latency_seconds).
    inter_token_latencies: list[float] = field(default_factory=list)
    last_token_at: dict[int, float] = field(default_factory=dict)
    # False for a request whose engines hold its tokens (GenerationPlan.reads_outputs_whole):
    # they arrive together, and the gaps between arrivals are no inter-token latency.
    observes_token_gaps: bool = True
    # Engine-side intervals (the engine's own clock); None until the engine reports them.
    queue_time: float | None = None
    prefill_time: float | None = None
    decode_time: float | None = None
    # Per choice, with a reasoning parser: tokens spent thinking, and the thinking's text.
    reasoning_tokens: dict[int, int] = field(default_factory=dict)
    reasoning_texts: dict[int, list[str]] = field(default_factory=dict)
    # Speculative decoding per choice: (draft tokens verified, accepted), cumulative.
    draft_tokens: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Refused before any engine took it (no engine, overloaded, none answered in time): it
    # is billed nothing (settlement records zero prompt tokens).
    never_reached_engine: bool = False
    # False for an echo-only completion (max_tokens 0): its one generated token is not given.
    counts_completion: bool = True

    def observe(self, prompt_index: int, choice: int, chunk: GenerationChunk) -> None:
        if chunk.token_ids:
            now = time.monotonic()
            if self.first_token_at is None:
                self.first_token_at = now
            last = self.last_token_at.get(choice)
            if last is not None and self.observes_token_gaps:
                self.inter_token_latencies.append(now - last)
            self.last_token_at[choice] = now
        self.completion_tokens[choice] = chunk.completion_tokens if self.counts_completion else 0
        self.cached_tokens[prompt_index] = max(
            self.cached_tokens.get(prompt_index, 0), chunk.cached_tokens or 0
        )
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        if chunk.reasoning_tokens:
            self.reasoning_tokens[choice] = (
                self.reasoning_tokens.get(choice, 0) + chunk.reasoning_tokens
            )
        if chunk.reasoning:
            self.reasoning_texts.setdefault(choice, []).append(chunk.reasoning)
        if chunk.draft_tokens:
            self.draft_tokens[choice] = (chunk.draft_tokens, chunk.accepted_draft_tokens)
        # One request's intervals: the longest over its samples and prompts.
        for name in ("queue_time", "prefill_time", "decode_time"):
            value = getattr(chunk, name, None)
            if value is not None and value >= (getattr(self, name) or 0.0):
                setattr(self, name, value)

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.completion_tokens.values())

    @property
    def num_reasoning_tokens(self) -> int:
        return sum(self.reasoning_tokens.values())

    def reasoning_text(self, choice: int = 0) -> str | None:
        """The whole thinking of ``choice`` so far (None when it had none): the one place any
        formatter reads it from once the sample has ended."""
        texts = self.reasoning_texts.get(choice)
        return "".join(texts) if texts else None

    @property
    def num_cached_tokens(self) -> int:
        return sum(self.cached_tokens.values())

    @property
    def prediction_tokens(self) -> tuple[int, int]:
        """(accepted, rejected) draft tokens of speculative decoding over all choices."""
        accepted = sum(a for _, a in self.draft_tokens.values())
        return accepted, sum(d for d, _ in self.draft_tokens.values()) - accepted

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started
