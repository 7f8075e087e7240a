"""Turn request bodies into prompt token ids, and refuse prompts the model cannot take."""

from __future__ import annotations

from typing import Any

from engine.text.tokenizer import ChatTokenizer
from inference.errors import ApiError, invalid_request


def render_chat_prompt(tokenizer: ChatTokenizer, body: dict[str, Any]) -> tuple[str, list[int]]:
    """The chat template applied to ``messages``: (prompt text, prompt token ids)."""
    messages = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
    for message, raw in zip(messages, body["messages"], strict=True):
        if raw.get("name"):
            message["name"] = raw["name"]
    text = tokenizer.render_chat(
        messages,
        add_generation_prompt=body.get("add_generation_prompt", True),
        **(body.get("chat_template_kwargs") or {}),
    )
    # The template writes the special tokens itself (BOS included when the model wants one).
    return text, tokenizer.encode(text, add_special_tokens=False)


def completion_prompts(
    tokenizer: ChatTokenizer, prompts: list[str | list[int]], *, add_special_tokens: bool = True
) -> list[tuple[str, list[int]]]:
    """Each prompt as (text, token ids); token-id prompts are checked against the vocabulary."""
    out = []
    for prompt in prompts:
        if isinstance(prompt, str):
            out.append((prompt, tokenizer.encode(prompt, add_special_tokens=add_special_tokens)))
        else:
            check_token_ids(tokenizer, prompt, param="prompt")
            out.append((tokenizer.decode(prompt, skip_special_tokens=False), list(prompt)))
    return out


def check_token_ids(tokenizer: ChatTokenizer, token_ids: list[int], *, param: str) -> None:
    vocab = tokenizer.vocab_size
    bad = next((t for t in token_ids if t >= vocab), None)
    if bad is not None:
        raise invalid_request(
            f"Token id {bad} is out of vocabulary (this model has {vocab} tokens).", param=param
        )


def max_tokens_for(
    *, prompt_tokens: int, requested: int | None, max_model_len: int, param: str
) -> int:
    """How many tokens may be generated; 400 when the prompt plus request exceeds the context."""
    if prompt_tokens >= max_model_len or (
        requested is not None and prompt_tokens + requested > max_model_len
    ):
        total = prompt_tokens + (requested or 0)
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {total} tokens ({prompt_tokens} in the {param}, {requested or 0} in "
            "the completion). Please reduce the length of the prompt or of the completion.",
            status=400,
            param=param,
            code="context_length_exceeded",
        )
    if prompt_tokens == 0:
        raise invalid_request("The prompt is empty after tokenization.", param=param)
    return requested if requested is not None else max_model_len - prompt_tokens
