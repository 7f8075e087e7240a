"""Tool calling, independent of any one API's response shape.

Chat completions use it, and so can the Responses API. How to use it:

1. ``ToolSetup.from_request(tools=..., tool_choice=..., parallel_tool_calls=..., parser=...)``
   (``definitions``): the request's validated tool fields (OpenAI's shapes) and the served
   model's parser name (``ModelEntry.tool_parser``); None when no tools are in play.
2. ``template_input(messages, setup, chat_template)`` (``rendering``): the messages and the
   ``tools`` argument for the chat template. Assistant ``tool_calls`` and ``tool`` messages
   are turned into what HF templates expect; a template that cannot render tools gets them
   as a system message in the parser's own format instead.
3. ``structured_for(setup)`` (``choice``): the ``StructuredOutput`` that forces a tool call
   (``tool_choice`` "required" or a named function), None for "auto"/"none".
4. ``parser_for(setup)`` (``parsers``): a fresh ``ToolCallParser`` per generated sample.
   Stream with ``feed(text_delta)`` and ``finish()``, which return events (``ContentDelta``,
   ``ToolCallStart``, ``ArgumentsDelta``); or ``parse(whole_text)`` for a ``ParsedOutput``
   (content and ``ToolCall`` list). Formatting those as API objects is the caller's job.

Parsers by name (``PARSERS``): "hermes" (``<tool_call>{json}</tool_call>``, Qwen2.5/Qwen3,
Hermes) and "llama3_json" (Llama 3.1's ``{"name": ..., "parameters": ...}``).
"""

from inference.tools.choice import structured_for
from inference.tools.definitions import ToolCall, ToolFunction, ToolSetup, new_call_id
from inference.tools.parsers import (
    PARSERS,
    ArgumentsDelta,
    ContentDelta,
    ParsedOutput,
    ToolCallParser,
    ToolCallStart,
    parser_for,
)
from inference.tools.rendering import template_input

__all__ = [
    "PARSERS",
    "ArgumentsDelta",
    "ContentDelta",
    "ParsedOutput",
    "ToolCall",
    "ToolCallParser",
    "ToolCallStart",
    "ToolFunction",
    "ToolSetup",
    "new_call_id",
    "parser_for",
    "structured_for",
    "template_input",
]
