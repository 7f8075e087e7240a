"""The engine stream with each sample's thinking split from its answer (see __init__.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from inference.reasoning import ReasoningParser, ReasoningSetup
from inference.transport import GenerationChunk

Item = tuple[int, int, GenerationChunk]


def split_chunk(parser: ReasoningParser, chunk: GenerationChunk) -> GenerationChunk:
    """``chunk`` with ``text`` the answer and ``reasoning`` the thinking it carries; its
    tokens are reasoning tokens when it carried thinking, or stayed inside it (a tag)."""
    split = parser.feed(chunk.text)
    if chunk.finish_reason:
        split += parser.finish()
    thinking = bool(split.reasoning) or (parser.in_reasoning and not split.content)
    return dataclasses.replace(
        chunk,
        text=split.content,
        reasoning=split.reasoning,
        reasoning_tokens=len(chunk.token_ids) if thinking else 0,
    )


async def split_reasoning(
    items: AsyncIterator[Item], setup: ReasoningSetup | None
) -> AsyncIterator[Item]:
    """``items`` with every chunk split; as they are when ``setup`` is None."""
    if setup is None:
        async for item in items:
            yield item
        return
    parsers: dict[int, ReasoningParser] = {}
    async for prompt_index, choice, chunk in items:
        parser = parsers.get(choice)
        if parser is None:
            parser = parsers[choice] = setup.new_parser()
        yield prompt_index, choice, split_chunk(parser, chunk)
