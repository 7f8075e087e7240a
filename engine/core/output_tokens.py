"""A step's sampled tokens (and accepted draft tokens) appended to a request, each checked for
what ends it: the grammar refusing or completing, a stop token or EOS (after ``min_tokens``),
``max_tokens``, the context length. Tokens after the one that ends the request are dropped.
A step whose masks left the request no token at all (NO_TOKEN) ends it with the client's
error: its constraints contradict each other there."""

from __future__ import annotations

from collections.abc import Collection

from engine.core.scheduler_output import NO_TOKEN
from engine.request import Request, RequestStatus

NO_TOKEN_CODE = "no_token_allowed"


def append_output_tokens(
    request: Request,
    tokens: list[int],
    logprobs: list,
    now: float,
    *,
    eos_token_ids: Collection[int],
    max_model_len: int,
) -> tuple[RequestStatus | None, int]:
    """(The status that ends the request, or None; how many tokens were appended)."""
    if request.timestamps.first_token is None:
        request.timestamps.first_token = now
    request.timestamps.last_token = now
    appended = 0
    for token, lp in zip(tokens, logprobs, strict=True):
        if token == NO_TOKEN:
            request.error = no_token_message(request)
            request.error_code = NO_TOKEN_CODE
            return RequestStatus.FINISHED_ABORTED, appended
        request.append_output_token(token)
        appended += 1
        if request.pending_logprobs is not None and lp is not None:
            request.pending_logprobs.append(lp)
        status = stop_status(request, token, eos_token_ids, max_model_len)
        if status is not None:
            return status, appended
    return None, appended


def no_token_message(request: Request) -> str:
    """Which of the request's constraints left nothing to generate, in the client's terms."""
    params = request.sampling_params
    named = []
    if params.allowed_token_ids:
        named.append("allowed_token_ids")
    if request.grammar is not None:
        named.append("the grammar of the response format or tools")
    if request.num_output_tokens < params.min_tokens:
        named.append("min_tokens (which holds back the stop tokens)")
    if len(named) > 1:
        why = f"{', '.join(named[:-1])} and {named[-1]} together allow none; loosen one of them"
    elif named:
        why = f"{named[0]} allows none"
    else:
        why = "the request's constraints allow none"
    return f"No token can be generated at output position {request.num_output_tokens}: {why}."


def stop_status(
    request: Request, token: int, eos_token_ids: Collection[int], max_model_len: int
) -> RequestStatus | None:
    """How ``token``, just appended, ends the request, or None if it goes on."""
    params = request.sampling_params
    grammar = request.grammar
    if grammar is not None and not grammar.accept(token):
        request.error = grammar.error
        return RequestStatus.FINISHED_ABORTED
    if request.num_output_tokens >= params.min_tokens:
        if token in params.stop_token_set:
            request.stop_reason = token
            return RequestStatus.FINISHED_STOPPED
        if not params.ignore_eos and token in eos_token_ids:
            return RequestStatus.FINISHED_STOPPED
    if grammar is not None and grammar.is_terminated:
        return RequestStatus.FINISHED_STOPPED  # the output is complete: nothing else fits
    if request.num_output_tokens >= request.max_tokens:
        return RequestStatus.FINISHED_LENGTH
    if request.num_tokens >= max_model_len:
        return RequestStatus.FINISHED_LENGTH
    return None


def ends_at_pending(request: Request, max_model_len: int) -> bool:
    """Whether the token a step in flight samples for ``request`` (engine/async_steps.py) is
    its last by length, max_tokens or the context, so no further step is wanted."""
    num_tokens = request.num_tokens + request.num_pending_tokens
    return (
        request.num_output_tokens + request.num_pending_tokens >= request.max_tokens
        or num_tokens >= max_model_len
    )
