"""The usage event an API process queues in Redis when a request ends (msgspec JSON)."""

from __future__ import annotations

import uuid

import msgspec

from controlplane.common.redis_clients import redis_key


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
    event_id: str = ""  # unique per event; the flush writes each id once
    batch_id: str = ""  # the Batch API batch that ran this request, if any
    end_user: str = ""  # the request's ``user``: the client's own end user, if it named one


encode_event = msgspec.json.Encoder().encode
decode_event = msgspec.json.Decoder(UsageEvent).decode


def new_event_id() -> str:
    return uuid.uuid4().hex


def usage_queue_key() -> str:
    """A Redis list: API processes RPUSH, ``usage_flush`` drains from the left."""
    return redis_key("usage", "queue")


def usage_processing_key() -> str:
    """The batch ``usage_flush`` is writing (moved here from the queue in one step)."""
    return redis_key("usage", "processing")
