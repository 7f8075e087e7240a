"""Redis plumbing shared by the engine service and the pooling engine: the client options,
consumer groups, decoding the entries their readers take, and the status record every engine
keeps alive (protocol.Keys.status)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from engine import protocol

M = TypeVar("M")


def connect(url: str, *, retries: int = 3) -> redis.Redis:
    """A client that rides out a dropped connection (a Redis restart) with a few quick retries.

    redis-py's default would retry ten times with up to 10 s between tries, stalling a thread
    for a minute; the engine's threads have their own loops and want to hear of an outage fast.
    ``retries=0`` for a writer that must decide itself whether a failed MULTI ran.
    """
    return redis.Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        socket_connect_timeout=2,
        socket_keepalive=True,
        health_check_interval=30,
    )


def as_str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def ensure_group(client: redis.Redis, stream: str, group: str = protocol.ENGINE_GROUP) -> None:
    """Create the consumer group (and stream) if missing; reads start at the stream's start."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def stream_gone(exc: redis.ResponseError) -> bool:
    """True when a read failed because its stream or consumer group no longer exists (Redis
    restarted empty, a flush, a deleted key): the reader creates them again and goes on.

    Two errors say so: NOGROUP for a read that starts after the loss, and, from Redis 7.0, a
    read blocked on the stream when its key was deleted is woken with "UNBLOCKED the stream key
    no longer exists"."""
    message = str(exc)
    return "NOGROUP" in message or ("UNBLOCKED" in message and "no longer exists" in message)


def decode_entries(
    entries: Iterable[tuple[bytes, dict | None]], decode: Callable[[bytes], M]
) -> tuple[list[tuple[str, M]], dict[str, str]]:
    """Stream entries as (entry id, message) pairs, and the malformed ones as entry id -> why
    (no ``protocol.FIELD``, or not such a message: msgspec's errors are ValueErrors) for the
    reader to log and acknowledge. A claimed entry deleted meanwhile comes without fields."""
    decoded: list[tuple[str, M]] = []
    malformed: dict[str, str] = {}
    for raw_id, fields in entries:
        try:
            decoded.append((as_str(raw_id), decode(fields[protocol.FIELD])))
        except (KeyError, TypeError, ValueError) as exc:
            malformed[as_str(raw_id)] = repr(exc)
    return decoded, malformed


def publish_status(
    client: redis.Redis, keys: protocol.Keys, status: protocol.EngineStatus, ttl_s: float
) -> None:
    """SET the record with a TTL, so a crash leaves it to expire, and register the engine in
    the engines set frontends find live engines through. The record is stamped here with
    where and when it was written."""
    status.pid, status.hostname, status.updated_at = os.getpid(), socket.gethostname(), time.time()
    pipe = client.pipeline(transaction=False)
    key = keys.status(status.model, status.engine_id)
    pipe.set(key, protocol.encode_status(status), px=int(ttl_s * 1000))
    pipe.sadd(keys.engines(), protocol.engine_member(status.model, status.engine_id))
    pipe.execute()


def withdraw_status(client: redis.Redis, keys: protocol.Keys, model: str, engine_id: str) -> None:
    """Remove the record at a clean exit."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(keys.status(model, engine_id))
    pipe.srem(keys.engines(), protocol.engine_member(model, engine_id))
    pipe.execute()
