"""EngineRequest: one engine request as the API sends it, built once by the generation plan.

It carries the protocol message itself (``engine.protocol.GenerateRequest``), the served model
whose request stream takes it, and what only the API needs to turn its outputs into text
(``OutputOptions``: stop strings and how they and special tokens show). ``EngineClient.generate`` sends it and
builds the request's output processor from it; failover re-submits derived copies.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from engine import protocol
from engine.protocol import AdapterRef, SamplingOptions


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """How the API turns a request's tokens into text; the engines never see these. The
    planner builds them once from the body; the output processor hands them to each sample's
    detokenizer (``engine.text.sample_output.SampleOutputProcessor``)."""

    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """The message for the engines and how the API processes what comes back."""

    # The served model whose engines run it (an adapter's base model): its request stream.
    model: str
    # ``frontend_id`` and ``arrival_time`` are stamped by the client as it sends it.
    message: protocol.GenerateRequest
    output: OutputOptions = field(default_factory=OutputOptions)

    @classmethod
    def build(
        cls,
        *,
        model: str,
        prompt_token_ids: list[int],
        sampling: SamplingOptions | None = None,
        request_id: str | None = None,
        adapter: AdapterRef | None = None,
        cache_salt: str = "",
        tenant: str = "",
        weight: float = 1.0,
        service_class: str = "interactive",
        priority: int = 0,
        output: OutputOptions | None = None,
        shared_prefix_salt: str = "",
        shared_prefix_tokens: int = 0,
        stream_outputs: bool = True,
    ) -> EngineRequest:
        message = protocol.GenerateRequest(
            request_id=request_id or uuid.uuid4().hex,
            frontend_id="",
            prompt_token_ids=list(prompt_token_ids),
            sampling=sampling or SamplingOptions(),
            adapter=adapter,
            cache_salt=cache_salt,
            tenant=tenant,
            weight=weight,
            service_class=service_class,
            priority=priority,
            shared_prefix_salt=shared_prefix_salt,
            shared_prefix_tokens=shared_prefix_tokens,
            stream_outputs=stream_outputs,
        )
        return cls(model=model, message=message, output=output or OutputOptions())

    @property
    def request_id(self) -> str:
        return self.message.request_id

    @property
    def sampling(self) -> SamplingOptions:
        return self.message.sampling
