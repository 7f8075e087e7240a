"""The interface every reasoning parser implements: one sample's text split into its thinking
and its answer, whole or as it streams.

``feed(text)`` returns the ``Split`` of the new text (a tag cut across deltas is held back
until it can be told apart), ``finish()`` flushes what was held once the sample ends, and
``parse(text)`` does both over a whole text, so streamed and whole responses come from the
same code. ``in_reasoning`` says whether the sample is inside its thinking right now, which
is how tokens are counted as reasoning tokens.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    reasoning: str = ""
    content: str = ""

    def __add__(self, other: Split) -> Split:
        return Split(self.reasoning + other.reasoning, self.content + other.content)


class ReasoningParser(ABC):
    """One sample's parser. ``starts_in_reasoning``: the prompt already opened the thinking
    (templates that end the generation prompt with ``<think>``), so the output begins in it."""

    def __init__(self, *, starts_in_reasoning: bool = False):
        self.starts_in_reasoning = starts_in_reasoning

    @property
    @abstractmethod
    def in_reasoning(self) -> bool:
        """Inside the thinking after the text fed so far."""

    @abstractmethod
    def feed(self, text: str) -> Split:
        """The thinking and the answer in the next piece of text (some may be held back)."""

    @abstractmethod
    def finish(self) -> Split:
        """Whatever was held back, once the sample has ended."""

    def parse(self, text: str) -> Split:
        return self.feed(text) + self.finish()


def held_back(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of ``text`` that could begin one of ``markers``."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if marker.startswith(text[-size:]):
                longest = size
                break
    return longest
