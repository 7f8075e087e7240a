"""The usage event an API process queues in Redis when a request ends (msgspec JSON)."""

from __future__ import annotations

import msgspec

from controlplane.tenants.redis_clients import redis_key


class UsageEvent(msgspec.Struct, frozen=True):
    finished_at: float  # Unix time
    request_id: str
    tenant_id: int
    key_id: int  # 0: a staff playground session
    key_prefix: str
    model: str
    adapter: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    time_to_first_token: float | None
    latency: float
    status: int
    finish_reason: str


encode_event = msgspec.json.Encoder().encode
decode_event = msgspec.json.Decoder(UsageEvent).decode


def usage_queue_key() -> str:
    """A Redis list: API processes RPUSH, ``usage_flush`` drains from the left."""
    return redis_key("usage", "queue")
