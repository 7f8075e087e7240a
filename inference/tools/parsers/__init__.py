"""Tool-call parsers: by name for a model's own format, or for grammar-forced outputs."""

from __future__ import annotations

from inference.tools.definitions import ToolSetup
from inference.tools.parsers.base import (
    ArgumentsDelta,
    ContentDelta,
    Event,
    ParsedOutput,
    ToolCallParser,
    ToolCallStart,
    collect,
)
from inference.tools.parsers.forced import NamedCallParser, RequiredCallsParser
from inference.tools.parsers.hermes import HermesParser
from inference.tools.parsers.llama3_json import Llama3JsonParser

# A served model's ``tool_parser`` names one of these.
PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
}


def parser_for(setup: ToolSetup) -> ToolCallParser | None:
    """A new parser for one sample of a request with these tools; None for "none"."""
    if setup.mode == "none":
        return None
    if setup.mode == "named":
        return NamedCallParser(setup.named)
    if setup.mode == "required":
        return RequiredCallsParser(max_calls=setup.max_calls)
    return PARSERS[setup.parser](max_calls=setup.max_calls)


__all__ = [
    "PARSERS",
    "ArgumentsDelta",
    "ContentDelta",
    "Event",
    "HermesParser",
    "Llama3JsonParser",
    "NamedCallParser",
    "ParsedOutput",
    "RequiredCallsParser",
    "ToolCallParser",
    "ToolCallStart",
    "collect",
    "parser_for",
]
