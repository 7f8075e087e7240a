"""The pooling engine's service loop: read embedding (or pair scoring) requests from Redis,
batch, reply.

Phases per turn: ``read`` (every queued request, up to a batch), ``embed`` (one runner call for
all their inputs), ``reply`` (one list push per request, then ack). A status thread keeps the
engine's status record fresh, so /ready and the dashboard see it like a generation engine.

Redis may go away (killed, restarted, a dropped connection): reads, replies and the status
record are retried until it answers, as the generation engine's are, and a reply computed
meanwhile is written then. Nothing ends the process but a stop.

Every ``REAP_EVERY_S`` the loop also takes over the requests of pooling engines of its model
that died holding them (recovery.py).
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import redis

from engine import protocol
from engine.pooling import messages
from engine.pooling.recovery import DeadPoolerReaper
from engine.pooling.runner import PoolingRunner
from engine.redis_outage import RETRY_AFTER_S, TRANSPORT_ERRORS, OutageLog, Worker
from engine.redis_streams import (
    connect,
    decode_entries,
    ensure_group,
    publish_status,
    stream_gone,
    withdraw_status,
)

logger = logging.getLogger(__name__)

STATUS_TTL_S = 5
STATUS_EVERY_S = 1.0
REAP_EVERY_S = 1.0
MAX_REQUESTS_PER_BATCH = 64


def _token_types(requests: list[messages.EmbedRequest]) -> list[list[int]] | None:
    """Every input's token types (zeros where a request sent none), None when none sent any."""
    if not any(request.token_type_ids for request in requests):
        return None
    return [
        types
        for request in requests
        for types in request.token_type_ids or [[0] * len(ids) for ids in request.inputs]
    ]


class PoolingService:
    def __init__(
        self,
        runner: PoolingRunner,
        *,
        model_name: str,
        redis_url: str,
        block_ms: int = 200,
        engine_id: str | None = None,
    ):
        self.runner = runner
        self.model_name = model_name
        self.redis = connect(redis_url)
        # No retries of its own: the status thread tries again soon (RETRY_AFTER_S).
        self.status_redis = connect(redis_url, retries=0)
        self.keys = protocol.Keys()
        self.stream = messages.embed_requests_key(model_name, self.keys)
        self.engine_id = engine_id or protocol.new_engine_id()
        self.block_ms = block_ms
        self.started_at = time.time()
        self.num_inputs_total = 0
        self.num_tokens_total = 0
        self._stop = threading.Event()
        self._outage = OutageLog(logger, "pooling-engine")  # the loop's: reads and replies
        self.reaper = DeadPoolerReaper(
            self.redis,
            self.keys,
            model=model_name,
            engine_id=self.engine_id,
            stream=self.stream,
            grace_s=2 * STATUS_EVERY_S + 0.5,  # two missed beats, and a slow one
        )

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        ensure_group(self.redis, self.stream, messages.POOLING_GROUP)
        self._publish_status_once()  # visible to /ready before the first request is read
        # Every second; after a failure every RETRY_AFTER_S until Redis answers.
        status_thread = Worker("pooling-status", self._publish_status_once, STATUS_EVERY_S)
        status_thread.start()
        logger.info("pooling engine %s serving %s", self.engine_id, self.model_name)
        try:
            self._loop()
        finally:
            # Also when the loop failed: a status record beside a loop that no longer reads
            # would have the API send this engine requests nobody answers.
            status_thread.stop()  # before the record is withdrawn, or it would write it again
        try:
            withdraw_status(self.status_redis, self.keys, self.model_name, self.engine_id)
            # Every request read here was answered: nothing for a survivor to take over.
            self.redis.xgroup_delconsumer(self.stream, messages.POOLING_GROUP, self.engine_id)
        except redis.RedisError as exc:
            logger.warning("could not withdraw pooling engine %s: %s", self.engine_id, exc)

    def _loop(self) -> None:
        reaped_at = -REAP_EVERY_S
        while not self._stop.is_set():
            if time.monotonic() - reaped_at >= REAP_EVERY_S:
                reaped_at = time.monotonic()
                claimed = self._until_redis_answers(self._reap)
                if claimed:
                    self._serve(claimed)
            entries = self._until_redis_answers(self._read)
            if entries:
                self._serve(entries)

    def _until_redis_answers(self, call):
        """``call()``'s result, tried again until Redis answers; None once stopping."""
        while not self._stop.is_set():
            try:
                result = call()
            except TRANSPORT_ERRORS as exc:
                self._outage.failed(exc)
                self._stop.wait(RETRY_AFTER_S)
                continue
            self._outage.answered()
            return result
        return None

    def _reap(self) -> list[tuple[bytes, dict]]:
        try:
            return self.reaper.check()
        except TRANSPORT_ERRORS:
            self.reaper.dead.forget()  # status keys missing across an outage prove nothing
            raise
        except redis.ResponseError as exc:  # the group gone with a Redis restarted empty, say
            logger.warning("taking over from dead pooling engines failed: %s", exc)
            return []

    def _read(self) -> list[tuple[bytes, dict]]:
        try:
            reply = self.redis.xreadgroup(
                messages.POOLING_GROUP,
                self.engine_id,
                {self.stream: ">"},
                count=MAX_REQUESTS_PER_BATCH,
                block=self.block_ms,
            )
        except redis.ResponseError as exc:
            if not stream_gone(exc):
                raise
            # The stream or group is gone with a Redis that restarted empty, or a flush.
            ensure_group(self.redis, self.stream, messages.POOLING_GROUP)
            return []
        return [entry for _s, items in reply or [] for entry in items]

    def _serve(self, entries: list[tuple[bytes, dict]]) -> None:
        decoded, malformed = decode_entries(entries, messages.decode_request)
        for entry_id in malformed:  # dropped (and acknowledged below), never stop the engine
            logger.warning("dropping malformed embedding request %s", entry_id)
        requests = [request for _, request in decoded]
        inputs = [ids for request in requests for ids in request.inputs]
        try:
            vectors = self.runner.embed(inputs, _token_types(requests)).numpy().astype("<f4")
            error = ""
        except Exception as exc:
            logger.exception("embedding batch failed")
            vectors, error = None, f"embedding failed: {exc}"
        replies, offset = [], 0
        for request in requests:
            count = len(request.inputs)
            reply = messages.EmbedReply(request_id=request.request_id, error=error)
            if vectors is not None:
                reply.vectors = [
                    np.ascontiguousarray(v).tobytes() for v in vectors[offset : offset + count]
                ]
                reply.dimensions = self.runner.dimensions
                reply.num_tokens = sum(len(ids) for ids in request.inputs)
            offset += count
            replies.append((request.reply_key, messages.encode(reply)))
        ids = [entry_id for entry_id, _ in entries]
        self._until_redis_answers(lambda: self._write_replies(replies, ids))
        self.num_inputs_total += len(inputs)
        self.num_tokens_total += sum(len(ids) for ids in inputs)
        logger.debug("embedded %d inputs for %d requests", len(inputs), len(requests))

    def _write_replies(self, replies: list[tuple[str, bytes]], ids: list[bytes]) -> None:
        """One pipeline (a failed one is built again: redis-py empties it): the replies, then
        the entries acknowledged and deleted. A command refused inside it (an XACK after the
        group vanished with a Redis that restarted empty) leaves the others written."""
        pipe = self.redis.pipeline(transaction=False)
        for reply_key, reply in replies:
            pipe.rpush(reply_key, reply)
            pipe.expire(reply_key, messages.REPLY_TTL_S)
        pipe.xack(self.stream, messages.POOLING_GROUP, *ids)
        pipe.xdel(self.stream, *ids)
        for result in pipe.execute(raise_on_error=False):
            if isinstance(result, TRANSPORT_ERRORS):
                raise result
            if isinstance(result, Exception):
                logger.warning("a command of a reply write failed: %s", result)

    def _publish_status_once(self) -> None:
        status = protocol.EngineStatus(
            engine_id=self.engine_id,
            model=self.model_name,
            prompt_tokens_total=self.num_tokens_total,
            started_at=self.started_at,
        )
        publish_status(self.status_redis, self.keys, status, STATUS_TTL_S)
