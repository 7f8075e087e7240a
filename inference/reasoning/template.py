"""Thinking switches as chat template arguments: what ``reasoning_effort`` means to a template.

Templates say how they take it: gpt-oss's reads ``reasoning_effort`` itself; Qwen3's has an
``enable_thinking`` switch, which ``reasoning_effort: "none"`` turns off (any other effort on).
A template with neither ignores the field, as it ignores any argument it does not use.
What the request sets in ``chat_template_kwargs`` wins over both.
"""

from __future__ import annotations

from typing import Any

# OpenAI's values (openai.types.shared.ReasoningEffort).
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def thinking_kwargs(
    effort: str | None, chat_template: str | None, explicit: dict[str, Any]
) -> dict[str, Any]:
    """Template arguments for ``reasoning_effort`` (none when the template takes neither)."""
    if effort is None or not chat_template:
        return {}
    if "reasoning_effort" in chat_template and "reasoning_effort" not in explicit:
        return {"reasoning_effort": effort}
    if "enable_thinking" in chat_template and "enable_thinking" not in explicit:
        return {"enable_thinking": effort != "none"}
    return {}
