"""An engine's status record: what every engine refreshes each second at ``Keys.status`` (JSON,
short TTL), and what admission, /metrics, readiness, the admin and the dashboard read of it.
Part of the wire contract (engine/protocol.py re-exports it); imports nothing heavy."""

from __future__ import annotations

import msgspec


class EngineStatus(msgspec.Struct, kw_only=True):
    """An engine's status record, refreshed every second at Keys.status with a short TTL."""

    engine_id: str
    model: str
    adapters: list[str] = msgspec.field(default_factory=list)
    kv_cache_usage: float = 0.0
    num_running: int = 0
    num_waiting: int = 0  # includes requests read from Redis and not yet scheduled
    num_free_blocks: int = 0
    num_total_blocks: int = 0
    tokens_per_s: float = 0.0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0
    num_steps_inside: int = 0  # steps run between two layers of another (step_preemption.py)
    # Requests this engine handed over to an idle peer of its model, and the times it said it
    # was idle itself (engine/service/hand_over.py).
    num_handed_over: int = 0
    num_idle_announcements: int = 0
    started_at: float = 0.0
    updated_at: float = 0.0
    draining: bool = False
    max_num_seqs: int = 0
    num_steps: int = 0
    pid: int = 0
    hostname: str = ""
    # LoRA adapters of running and waiting requests, and the engine's adapter slots
    # (what vLLM exports as vllm:lora_requests_info).
    running_lora_adapters: list[str] = msgspec.field(default_factory=list)
    waiting_lora_adapters: list[str] = msgspec.field(default_factory=list)
    max_lora: int = 0
    # The version (content checksum) of each adapter in ``adapters``.
    adapter_checksums: dict[str, str] = msgspec.field(default_factory=dict)
    # Speculative decoding totals (vllm:spec_decode_*): verification steps with drafts, draft
    # tokens verified, draft tokens accepted.
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    # Tokens per KV block when prefix caching is on (0: off): how the router hashes a prompt
    # to ask this engine's prefix index (engine/direct_routing.py).
    block_size: int = 0
    # "fcfs", "priority" or "fair" ("": a record from before the field): a frontend holds a
    # tenant's burst back in front of fair engines only (inference/transport/tenant_backlog.py).
    scheduling_policy: str = ""
    # The most requests the engine keeps read and not yet scheduled: its backpressure bound,
    # look-ahead included, which grows with the frontends sending (engine/service/read_ahead.py).
    queue_bound: int = 0

    @property
    def schedules_fairly(self) -> bool:
        return self.scheduling_policy in ("fair", "")

    @property
    def spec_decode_acceptance_rate(self) -> float:
        drafted = self.spec_decode_num_draft_tokens
        return self.spec_decode_num_accepted_tokens / drafted if drafted else 0.0

    def holds_adapter(self, name: str, checksum: str = "") -> bool:
        """Has this engine loaded adapter ``name`` (this version, when ``checksum`` is given)?
        A record without checksums (an older engine) vouches for the name only."""
        if name not in self.adapters:
            return False
        loaded = self.adapter_checksums.get(name)
        return not checksum or loaded is None or loaded == checksum


_status_decoder = msgspec.json.Decoder(EngineStatus)


def encode_status(status: EngineStatus) -> bytes:
    return msgspec.json.encode(status)


def decode_status(data: bytes) -> EngineStatus:
    return _status_decoder.decode(data)
