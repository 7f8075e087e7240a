"""Messages between API processes and pooling engines, and their Redis key names.

msgspec structs, msgpack on the wire; torch-free so the API can import this module. Vectors
travel as little-endian float32 bytes: 4 bytes a dimension, and the API can base64 them as is.
"""

from __future__ import annotations

import msgspec

from engine.protocol import Keys

# Consumer group through which every pooling engine of a model reads its request stream.
POOLING_GROUP = "poolers"
FIELD = b"m"
# Replies wait this long in Redis for an API process that may have gone away.
REPLY_TTL_S = 60


class EmbedRequest(msgspec.Struct, tag="embed", kw_only=True):
    """Token ids of every input of one /v1/embeddings, /v1/rerank or /v1/score call (already
    checked by the API). For a cross-encoder each input is a (query, document) pair, and
    ``token_type_ids`` (one list per input, as long as it) says which segment each token is in;
    empty means every token is of type 0."""

    request_id: str
    reply_key: str
    inputs: list[list[int]]
    arrival_time: float = 0.0
    token_type_ids: list[list[int]] = msgspec.field(default_factory=list)


class EmbedReply(msgspec.Struct, tag="embed_reply", kw_only=True):
    """One float32 vector per input, in input order (a cross-encoder's: its one score);
    ``error`` set when the engine failed."""

    request_id: str
    vectors: list[bytes] = msgspec.field(default_factory=list)
    dimensions: int = 0
    num_tokens: int = 0
    error: str = ""


_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(EmbedRequest)
_reply_decoder = msgspec.msgpack.Decoder(EmbedReply)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_request(data: bytes) -> EmbedRequest:
    return _request_decoder.decode(data)


def decode_reply(data: bytes) -> EmbedReply:
    return _reply_decoder.decode(data)


def embed_requests_key(model: str, keys: Keys | None = None) -> str:
    """Stream of EmbedRequest for one embedding model."""
    return f"{(keys or Keys()).prefix}:embed:{model}"


def embed_reply_key(request_id: str, keys: Keys | None = None) -> str:
    """List that receives the one EmbedReply of a request (the API waits on it with BLPOP)."""
    return f"{(keys or Keys()).prefix}:embed-reply:{request_id}"
