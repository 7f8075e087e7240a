"""SamplingParams: how to pick tokens for one request, with vLLM's field names and meanings.

``stop`` strings are accepted and kept, but the engine does not match them: it sees token ids
only. The API process (and the offline ``LLM``) match stop strings on the detokenized text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from engine.protocol import SamplingOptions, StructuredOutput

# Greedy below this temperature, as vLLM does; avoids dividing logits by ~0.
GREEDY_EPSILON = 1e-5
MAX_LOGPROBS = 20
# One source of defaults for the API and the offline LLM alike: the protocol's.
_DEFAULTS = SamplingOptions()


@dataclass(slots=True)
class SamplingParams:
    n: int = _DEFAULTS.n
    presence_penalty: float = _DEFAULTS.presence_penalty
    frequency_penalty: float = _DEFAULTS.frequency_penalty
    repetition_penalty: float = _DEFAULTS.repetition_penalty
    temperature: float = _DEFAULTS.temperature
    top_p: float = _DEFAULTS.top_p
    top_k: int = _DEFAULTS.top_k  # 0 or -1: all tokens
    min_p: float = _DEFAULTS.min_p
    seed: int | None = _DEFAULTS.seed
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = _DEFAULTS.ignore_eos
    max_tokens: int | None = _DEFAULTS.max_tokens  # None: up to max_model_len
    min_tokens: int = _DEFAULTS.min_tokens
    logprobs: int | None = _DEFAULTS.logprobs
    prompt_logprobs: int | None = _DEFAULTS.prompt_logprobs
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # A grammar the output must follow (engine/structured/); its spec is checked when compiled.
    structured: StructuredOutput | None = _DEFAULTS.structured
    # False: never speculate for this request (engine/spec_decode/); True: as the engine does.
    speculative_decoding: bool = _DEFAULTS.speculative_decoding
    # Token id -> bias added to its logit (OpenAI's logit_bias; at most +-100).
    logit_bias: dict[int, float] | None = None
    # Only these tokens may be sampled (vLLM's allowed_token_ids; None: any).
    allowed_token_ids: list[int] | None = None
    _stop_token_set: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_options(cls, options: SamplingOptions) -> SamplingParams:
        """The engine's params for a request off the wire; ValueError for refused values."""
        fields = msgspec.structs.asdict(options)
        fields["stop_token_ids"] = list(fields["stop_token_ids"])
        fields["logit_bias"] = dict(fields["logit_bias"]) or None
        return cls(**fields)

    def __post_init__(self) -> None:
        _int_at_least("n", self.n, 1)
        _number_in("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _number_in("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _number_in("repetition_penalty", self.repetition_penalty, 0.0, float("inf"), low_open=True)
        _number_in("temperature", self.temperature, 0.0, float("inf"))
        _number_in("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _number_in("min_p", self.min_p, 0.0, 1.0)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(
                f"top_k must be -1, 0 (disabled) or a positive integer, got {self.top_k!r}"
            )
        if self.top_k == -1:
            self.top_k = 0
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        elif not all(isinstance(s, str) for s in self.stop):
            raise ValueError("stop must be a string or a list of strings")
        else:
            self.stop = list(self.stop)
        if any(s == "" for s in self.stop):
            raise ValueError("stop must not contain empty strings")
        ids = list(self.stop_token_ids or [])
        for tid in ids:
            if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
                raise ValueError(f"stop_token_ids must be non-negative integers, got {tid!r}")
        self.stop_token_ids = ids
        self._stop_token_set = frozenset(ids)
        if self.max_tokens is not None:
            _int_at_least("max_tokens", self.max_tokens, 1)
        _int_at_least("min_tokens", self.min_tokens, 0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must be at most max_tokens ({self.max_tokens})"
            )
        if self.logprobs is not None:
            _int_in("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.prompt_logprobs is not None:
            _int_in("prompt_logprobs", self.prompt_logprobs, 0, MAX_LOGPROBS)
        if not isinstance(self.speculative_decoding, bool):
            raise ValueError(
                f"speculative_decoding must be true or false, got {self.speculative_decoding!r}"
            )
        if self.structured is not None and not isinstance(self.structured, StructuredOutput):
            raise ValueError("structured must be an engine.protocol.StructuredOutput")
        self.logit_bias = _checked_logit_bias(self.logit_bias)
        if self.allowed_token_ids is not None:
            ids = list(self.allowed_token_ids)
            if not ids or not all(_is_token_id(t) for t in ids):
                raise ValueError(
                    "allowed_token_ids must be a non-empty list of non-negative integers"
                )
            self.allowed_token_ids = ids

    @property
    def token_ids_named(self) -> list[int]:
        """Every token id the params name for the sampler to index (logit_bias, allowed
        tokens): the engine checks them against the vocabulary (request_checks.py)."""
        return [*(self.logit_bias or ()), *(self.allowed_token_ids or ())]

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_EPSILON

    @property
    def stop_token_set(self) -> frozenset[int]:
        return self._stop_token_set

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )


MAX_LOGIT_BIAS = 100.0  # OpenAI's range, either way


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_logit_bias(bias: object) -> dict[int, float] | None:
    """``bias`` as token id -> float (None when empty); ValueError naming a bad entry."""
    if not bias:
        return None
    if not isinstance(bias, dict):
        raise ValueError("logit_bias must be a dict of token id -> bias")
    checked = {}
    for token, value in bias.items():
        if not _is_token_id(token):
            raise ValueError(f"logit_bias keys must be non-negative integers, got {token!r}")
        _number_in(f"logit_bias[{token}]", value, -MAX_LOGIT_BIAS, MAX_LOGIT_BIAS)
        checked[token] = float(value)
    return checked


def _int_at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _int_in(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def _number_in(
    name: str, value: object, low: float, high: float, *, low_open: bool = False
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    too_low = value <= low if low_open else value < low
    if too_low or value > high or value != value:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bracket}{low}, {high}], got {value!r}")
