"""vLLM's ``prompt_logprobs`` in a whole answer (chat: the response's; completions: each
choice's, for its own prompt): per prompt token, null for the first (nothing predicts it),
else ``{token id: {"logprob", "rank", "decoded_token"}}`` for the prompt's own token and the
asked number of most likely alternatives at that position, as vLLM answers them."""

from __future__ import annotations

from typing import Any

from inference.transport import TokenLogprob


def prompt_logprobs_entries(
    prompt: list[TokenLogprob], alternatives: int
) -> list[dict[str, Any] | None]:
    entries: list[dict[str, Any] | None] = []
    for position in prompt:
        if position.logprob is None:
            entries.append(None)
            continue
        own = {"logprob": position.logprob, "rank": position.rank, "decoded_token": position.token}
        entry = {str(position.token_id): own}
        for rank, (token_id, text, logprob) in enumerate(position.top[:alternatives], start=1):
            entry.setdefault(
                str(token_id), {"logprob": logprob, "rank": rank, "decoded_token": text}
            )
        entries.append(entry)
    return entries


def with_alternatives(prompt: list[TokenLogprob], alternatives: int) -> list[TokenLogprob]:
    """``prompt`` with at most ``alternatives`` alternatives a token: the engine computes as
    many as the larger of echo's ``logprobs`` and ``prompt_logprobs`` asks."""
    return [
        p
        if len(p.top) <= alternatives
        else TokenLogprob(p.token_id, p.token, p.logprob, p.top[:alternatives], p.rank)
        for p in prompt
    ]
