"""Every message that crosses Redis between API processes and engines, and the key names.

msgspec structs only (msgpack on streams, JSON for status records), nothing pickled. This
module imports nothing heavy: API processes import it and must never load torch. New fields go
last and carry defaults, so engines and frontends of neighbouring versions still understand
each other. docs/protocol.md describes the whole contract.
"""

from __future__ import annotations

import msgspec

# The status record is part of this contract; it lives in its own module.
from engine.engine_status import EngineStatus as EngineStatus
from engine.engine_status import decode_status as decode_status
from engine.engine_status import encode_status as encode_status

# So are the key names and ids (their own module, for its length).
from engine.redis_keys import Keys as Keys
from engine.redis_keys import engine_member as engine_member
from engine.redis_keys import new_engine_id as new_engine_id
from engine.redis_keys import new_frontend_id as new_frontend_id
from engine.redis_keys import next_stream_id as next_stream_id
from engine.redis_keys import redis_prefix as redis_prefix
from engine.redis_keys import split_engine_member as split_engine_member

# Consumer group through which every engine of a model reads that model's request stream.
ENGINE_GROUP = "engines"
# The field of every stream entry; its value is the msgpack-encoded message.
FIELD = b"m"
# A request entry moved off a dead engine's direct stream also carries how many engines were
# lost while holding it (engine/service/recovery.py counts the rest from its deliveries).
LOST_FIELD = b"lost"

# A frontend (an API process, the Batch API's worker) counts as sending to a model this long
# after it last read the model's engines to send a request (Keys.frontends). Longer than its
# admission snapshot's life, so a process sending steadily never drops out; wall-clock scores,
# so hosts' clocks may differ by a few seconds.
FRONTEND_WINDOW_S = 10.0
# Each frontend keeps up to this many of a tenant's unstarted requests per engine, however many
# frontends share the tenant's bound (inference/transport/tenant_backlog.py); the engines' read
# ahead grows with the frontends past the point where this floor takes over
# (engine/service/read_ahead.py).
MIN_TENANT_SHARE = 8
# Entries Keys.idle keeps: only what engines read now matters.
IDLE_STREAM_LEN = 1000


# ---------------------------------------------------------------- requests (API -> engine)


class StructuredOutput(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A constraint on the generated tokens, enforced by the engine with a token bitmask.

    ``kind`` and ``spec``:
      - "json": ``spec`` is a JSON Schema, as JSON text;
      - "json_object": any JSON object (``spec`` empty);
      - "regex": ``spec`` is a regular expression the whole output must match;
      - "choice": ``spec`` is a JSON list of strings, the output is exactly one of them;
      - "grammar": ``spec`` is a Lark grammar (llguidance's dialect, EBNF-like) or GBNF.
    The API validates the spec (engine.structured.spec) before it sends a request, so an
    engine that still cannot compile one ends that request with an error delta.
    """

    kind: str
    spec: str = ""


class SamplingOptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Sampling fields as vLLM names them; the engine builds its SamplingParams from these.

    The defaults here are the platform's only sampling defaults: the API leaves out what a
    client did not send, and ``engine.SamplingParams`` takes its defaults from this struct.
    Stop strings are not here: the API process matches them on detokenized text.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0, as vLLM accepts both): off
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = msgspec.field(default_factory=list)
    ignore_eos: bool = False
    max_tokens: int | None = 16  # None: up to the model's context length
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    structured: StructuredOutput | None = None
    # False: no speculative decoding for this request, even where its engine speculates.
    speculative_decoding: bool = True
    # OpenAI's logit_bias: token id -> a bias in [-100, 100] added to its logit before the
    # penalties and the draw (vLLM's order); -100 all but bans a token, 100 all but forces it.
    logit_bias: dict[int, float] = msgspec.field(default_factory=dict)
    # vLLM's allowed_token_ids: only these tokens may be sampled (None: any).
    allowed_token_ids: list[int] | None = None


class AdapterRef(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A LoRA adapter by name; checksum and path let the engine load and cache it safely."""

    name: str
    checksum: str = ""
    path: str = ""


class GenerateRequest(msgspec.Struct, tag="generate", kw_only=True):
    request_id: str
    frontend_id: str
    prompt_token_ids: list[int]
    sampling: SamplingOptions = msgspec.field(default_factory=SamplingOptions)
    adapter: AdapterRef | None = None
    cache_salt: str = ""
    tenant: str = ""
    arrival_time: float = 0.0  # wall clock (time.time()) when the API accepted it
    priority: int = 0
    # Failover (inference/transport/failover.py): this many trailing prompt tokens are output an engine
    # that died had already produced. The engine counts them as output (penalties, min_tokens,
    # max_tokens, the seed's position); ``sampling`` carries the budget left (max_tokens and
    # min_tokens less these), so an engine that ignores the field still stops on time.
    resumed_output_tokens: int = 0
    # Shared prefixes (docs/architecture.md): the first ``shared_prefix_tokens`` prompt tokens
    # are an operator-declared prefix the API matched; the blocks wholly inside them are cached
    # under ``shared_prefix_salt`` (derived by the API per prefix, version and model, never from
    # client input), every later block under ``cache_salt``. 0: the whole prompt is private.
    shared_prefix_salt: str = ""
    shared_prefix_tokens: int = 0
    # Fair share (engine/core/fair_share.py): ``tenant`` above is an opaque id of the tenant
    # (never its salt or name), ``weight`` its share, ``service_class`` "interactive" or "batch".
    weight: float = 1.0
    service_class: str = "interactive"
    # False: the frontend reads the output only whole (a non-streaming request without stop
    # strings). The engine sends the first delta at once, then holds the rest and sends it
    # merged when the sample finishes, or after OutputHold.FLUSH_S (engine/service/
    # output_hold.py): one output entry and one frontend wake-up where there was one a step.
    stream_outputs: bool = True


# ---------------------------------------------------------------- control (API -> engines)


class AbortRequest(msgspec.Struct, tag="abort", kw_only=True):
    request_id: str


class LoadAdapter(msgspec.Struct, tag="load_adapter", kw_only=True):
    adapter: AdapterRef


class UnloadAdapter(msgspec.Struct, tag="unload_adapter", kw_only=True):
    name: str


class Drain(msgspec.Struct, tag="drain", kw_only=True):
    """Stop taking requests, finish or hand back running ones, exit. Empty id: every engine."""

    engine_id: str = ""


class Idle(msgspec.Struct, tag="idle", kw_only=True):
    """From an engine with nothing waiting and a batch slot free (as it starts, then at most
    every 0.25 s while it has worked since), on Keys.idle, to its model's other engines: one
    holding waiting requests it has not started hands some over (engine/service/hand_over.py).
    The one control message an engine sends."""

    engine_id: str
    room: int  # requests it may take (its reader's bound less what it holds)
    load: int  # its running + waiting requests


ControlMessage = AbortRequest | LoadAdapter | UnloadAdapter | Drain | Idle


# ---------------------------------------------------------------- outputs (engine -> API)


class TokenLogprob(msgspec.Struct, array_like=True):
    """One generated (or prompt) token's logprob and the top alternatives at that position."""

    token_id: int
    logprob: float
    top_ids: list[int] = msgspec.field(default_factory=list)
    top_logprobs: list[float] = msgspec.field(default_factory=list)
    rank: int = 0  # of token_id in the distribution, 1 the most likely; 0: not sent


class RequestDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one step produced for one sample of one request.

    ``error`` set means the request failed (engine died, bad input the engine refused): the
    frontend reports it and stops waiting. ``finish_reason`` is "stop", "length" or "abort".
    """

    request_id: str
    index: int = 0
    new_token_ids: list[int] = msgspec.field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    error: str = ""
    # With ``error``, when the request itself caused it (its constraints allow no token): the
    # OpenAI error code the frontend answers with as the client's error (a 400).
    error_code: str = ""
    # On the final delta: intervals measured on the engine's own clock (vLLM's definitions:
    # queued -> scheduled, scheduled -> first token, first token -> last token).
    queue_time: float | None = None
    prefill_time: float | None = None
    decode_time: float | None = None
    # With ``error``: the engine running the request died (a survivor says so). The frontend
    # may re-submit the rest of the request elsewhere instead of reporting the error.
    engine_lost: bool = False
    # Tokens of this sample this engine request has sent so far, this delta's included (0: not
    # counted). A frontend that received fewer lost outputs in transit (a Redis that restarted
    # without them) and must fail the request, never finish it normally.
    num_output_tokens: int = 0
    # Speculative decoding, cumulative for this sample: draft tokens verified, and accepted.
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


class OutputBatch(msgspec.Struct, tag="outputs", kw_only=True):
    """ONE stream entry per engine step per frontend: every delta of its requests."""

    engine_id: str
    deltas: list[RequestDelta]
    step: int = 0


class StartedRecord(msgspec.Struct, array_like=True):
    """What a survivor needs to tell a frontend that a dead engine's request failed."""

    request_id: str
    frontend_id: str


# ---------------------------------------------------------------- codecs

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(GenerateRequest)
_control_decoder = msgspec.msgpack.Decoder(ControlMessage)
_output_decoder = msgspec.msgpack.Decoder(OutputBatch)
_started_decoder = msgspec.msgpack.Decoder(StartedRecord)
_adapter_decoder = msgspec.msgpack.Decoder(AdapterRef)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_request(data: bytes) -> GenerateRequest:
    """Raises msgspec.DecodeError (bad bytes) or msgspec.ValidationError (wrong shape)."""
    return _request_decoder.decode(data)


def decode_control(data: bytes) -> ControlMessage:
    return _control_decoder.decode(data)


def decode_outputs(data: bytes) -> OutputBatch:
    return _output_decoder.decode(data)


def decode_started(data: bytes) -> StartedRecord:
    return _started_decoder.decode(data)


def decode_adapter(data: bytes) -> AdapterRef:
    return _adapter_decoder.decode(data)
