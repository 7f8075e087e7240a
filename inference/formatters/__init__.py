"""Response shapes (OpenAI's, and Anthropic's Messages), one formatter each behind one
interface (base.ResponseFormatter)."""

from __future__ import annotations

from inference.formatters.base import ResponseFormatter, collect_response, stream_events
from inference.formatters.chat import ChatFormatter
from inference.formatters.completions import CompletionFormatter
from inference.formatters.messages import MessagesFormatter
from inference.formatters.responses import ResponsesFormatter
from inference.generation.plan import GenerationPlan, GenerationStats

FORMATTERS: dict[str, type[ResponseFormatter]] = {
    "chat": ChatFormatter,
    "completion": CompletionFormatter,
    "response": ResponsesFormatter,
    "messages": MessagesFormatter,
}


def formatter_for(plan: GenerationPlan, stats: GenerationStats) -> ResponseFormatter:
    return FORMATTERS[plan.kind](plan, stats)


__all__ = ["ResponseFormatter", "collect_response", "formatter_for", "stream_events"]
