"""Reasoning output: a sample's thinking told apart from its answer, for every API shape.

A served model's ``reasoning_parser`` (controlplane/deployments/reasoning_parsers.py, set
from its chat template at registration) names one of ``PARSERS``; planning turns it into a
``ReasoningSetup`` on the plan (``reasoning_setup``), None for models that do not think.
``split_reasoning`` (split.py) then runs between the engine stream and every formatter: each
``GenerationChunk``'s ``text`` becomes the answer only and its ``reasoning`` the thinking,
with ``reasoning_tokens`` counted, so tool-call parsers and formatters never see thinking
text, and a formatter shows ``chunk.reasoning`` as its API shapes it (chat's
``reasoning_content``/``reasoning``, Responses' reasoning items, Messages' thinking blocks).
The whole thinking of a choice is ``GenerationStats.reasoning_text(choice)`` at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.reasoning.base import ReasoningParser, Split
from inference.reasoning.harmony import HarmonyParser
from inference.reasoning.think import OPEN as THINK_OPEN
from inference.reasoning.think import ThinkParser

PARSERS: dict[str, type[ReasoningParser]] = {
    "think": ThinkParser,
    "gpt_oss": HarmonyParser,
}


@dataclass(frozen=True)
class ReasoningSetup:
    """How one generation's samples are split: the parser's name, and whether the prompt
    already opened the thinking."""

    parser: str
    starts_in_reasoning: bool = False

    def new_parser(self) -> ReasoningParser:
        return PARSERS[self.parser](starts_in_reasoning=self.starts_in_reasoning)


def reasoning_setup(parser: str, prompt: str) -> ReasoningSetup | None:
    """The setup for a model's ``reasoning_parser`` ("" or unknown: None) and its rendered
    prompt: a prompt that ends by opening the thinking makes the output start inside it."""
    if parser not in PARSERS:
        return None
    tail = prompt.rstrip()
    if parser == "think":
        opened = tail.endswith(THINK_OPEN)
    else:
        opened = tail.endswith("<|channel|>analysis<|message|>")
    return ReasoningSetup(parser=parser, starts_in_reasoning=opened)


__all__ = ["PARSERS", "ReasoningParser", "ReasoningSetup", "Split", "reasoning_setup"]
