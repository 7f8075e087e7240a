"""Which reasoning format a served model writes: the names the API's parsers go by
(inference/reasoning), and how a chat template tells it."""

from __future__ import annotations

THINK, GPT_OSS = "think", "gpt_oss"

REASONING_PARSER_CHOICES = [
    (THINK, "<think>...</think> (Qwen3, QwQ, DeepSeek-R1)"),
    (GPT_OSS, "Harmony channels: analysis, then final (gpt-oss)"),
]


def default_reasoning_parser(chat_template: str | None) -> str:
    """The parser for a checkpoint's chat template ("" : the model does not think aloud).

    Thinking templates render the tags they expect back: Qwen3's and DeepSeek-R1's write
    ``<think>`` (in earlier turns, or at the end of the generation prompt), gpt-oss's writes
    harmony's ``<|channel|>`` headers.
    """
    if not chat_template:
        return ""
    if "<|channel|>" in chat_template:
        return GPT_OSS
    if "<think>" in chat_template or "</think>" in chat_template:
        return THINK
    return ""
