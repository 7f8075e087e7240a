"""The API side of embeddings: tokenise inputs, queue them for a pooling engine, await vectors.

Requests go to the model's embedding stream (engine.pooling.messages); the pooling engine
pushes one reply onto a per-request list that this client waits on with BLPOP.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import redis.asyncio as aioredis
from tokenizers import Encoding, Tokenizer

from controlplane.common.redis_pools import async_blocking_pool
from engine.pooling import messages
from engine.protocol import Keys

MAX_CONNECTIONS = 256
# How much longer than its BLPOP a waiting request's socket waits for Redis's answer.
REPLY_WAIT_MARGIN_S = 5.0


class EmbeddingTokenizer:
    """The encoder's tokenizer with padding and truncation off: lengths are checked, not cut.

    sentence-transformers' tokenizer.json files often pad every input to a fixed length; token
    counts for usage and the length check need the real ones.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.no_truncation()

    @cached_property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @cached_property
    def dimensions(self) -> int:
        config = json.loads((self.path / "config.json").read_text())
        return int(config["hidden_size"])

    def encode(self, text: str) -> list[int]:
        if len(text) < 4096:
            return self._tok.encode(text, add_special_tokens=True).ids
        # encode_batch releases the GIL (encode holds it): a long input leaves the loop free.
        return self._tok.encode_batch([text], add_special_tokens=True)[0].ids

    def encode_segments(self, texts: list[str]) -> list[Encoding]:
        """Each text's tokens without the special ones, to cut before ``with_special_tokens``."""
        return self._tok.encode_batch(texts, add_special_tokens=False)

    def num_special_tokens(self, *, pair: bool) -> int:
        """Tokens ``with_special_tokens`` adds to one segment, or to a pair."""
        return self._tok.num_special_tokens_to_add(pair)

    def with_special_tokens(
        self, first: Encoding, second: Encoding | None = None
    ) -> tuple[list[int], list[int]]:
        """Token ids and token types of one segment, or of a (query, document) pair, as the
        model was trained to read them ([CLS] query [SEP] document [SEP] for BERT)."""
        encoding = self._tok.post_process(first, second, add_special_tokens=True)
        return encoding.ids, encoding.type_ids


class EmbeddingsClient:
    """Per-process (per event loop) client, configured from Django settings."""

    _instances: ClassVar[dict[int, tuple[Any, EmbeddingsClient]]] = {}

    def __init__(self, redis_url: str, *, prefix: str, timeout: float):
        # Every waiting request holds a connection in BLPOP: past the pool's size, new ones
        # wait for a free connection instead of failing (redis-py's default pool raises).
        # Its socket waits out the BLPOP: redis-py 8 gives up reading after 5 s by default,
        # so an embedding that took longer (a big batch on a CPU, a crashed engine's requests
        # taken up by a survivor) failed after three such tries, 15 s, as if Redis were away.
        pool = async_blocking_pool(
            redis_url,
            max_connections=MAX_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout + REPLY_WAIT_MARGIN_S,
        )
        self.redis = aioredis.Redis(connection_pool=pool)
        self.keys = Keys(prefix)
        self.timeout = timeout

    @classmethod
    def for_process(cls) -> EmbeddingsClient:
        from django.conf import settings

        loop = asyncio.get_running_loop()
        entry = cls._instances.get(id(loop))
        if entry is None or entry[0] is not loop:
            client = cls(
                settings.REDIS_URL,
                prefix=settings.PLATFORM_REDIS_PREFIX,
                timeout=float(settings.ENGINE_SILENCE_TIMEOUT),
            )
            cls._instances[id(loop)] = (loop, client)
            return client
        return entry[1]

    async def embed(
        self, *, model: str, inputs: list[list[int]], token_type_ids: list[list[int]] = ()
    ) -> messages.EmbedReply:
        """Vectors for ``inputs`` (token ids; a cross-encoder's pairs with their
        ``token_type_ids``); raises the engine client's errors on failure."""
        from inference.transport.engine_client import EngineError, EngineTimeout

        request_id = f"embd-{uuid.uuid4().hex}"
        reply_key = messages.embed_reply_key(request_id, self.keys)
        request = messages.EmbedRequest(
            request_id=request_id,
            reply_key=reply_key,
            inputs=inputs,
            token_type_ids=list(token_type_ids),
        )
        stream = messages.embed_requests_key(model, self.keys)
        await self.redis.xadd(stream, {messages.FIELD: messages.encode(request)})
        try:
            popped = await self.redis.blpop([reply_key], timeout=self.timeout)
        finally:
            await self.redis.delete(reply_key)
        if popped is None:
            raise EngineTimeout(f"the embedding engine for `{model}` did not answer in time")
        reply = messages.decode_reply(popped[1])
        if reply.error:
            raise EngineError(reply.error)
        return reply
