"""What a request's tool fields mean, once validated: the functions, and how a call is chosen."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["auto", "none", "required", "named"]
DEFAULT_PARSER = "hermes"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolFunction:
    """One function tool: its name, description and parameters (a JSON Schema object)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The schema its arguments follow; a function without parameters takes an object."""
        return self.parameters if self.parameters is not None else {"type": "object"}

    def as_tool(self) -> dict[str, Any]:
        """OpenAI's (and HF chat templates') ``{"type": "function", "function": {...}}``."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters_schema
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: ``arguments`` is JSON text, as OpenAI returns it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolSetup:
    """The tools of one request and how calls are made.

    ``mode``: "auto" (the model decides; its own output format is parsed with ``parser``),
    "none" (tools are shown to the model, no call is parsed), "required" (at least one call,
    grammar-enforced) or "named" (exactly one call of ``named``, grammar-enforced).
    ``parallel``: more than one call per turn allowed. ``legacy``: the request used the
    deprecated ``functions`` (inference/schemas/legacy_functions.py), so calls are answered
    as ``function_call``.
    """

    functions: tuple[ToolFunction, ...]
    mode: Mode = "auto"
    named: str | None = None
    parallel: bool = True
    parser: str = DEFAULT_PARSER
    legacy: bool = False

    @classmethod
    def from_request(
        cls,
        *,
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        parallel_tool_calls: bool | None = None,
        parser: str | None = None,
        legacy: bool = False,
    ) -> ToolSetup | None:
        """From validated OpenAI fields; None when the request has no tools."""
        if not tools:
            return None
        functions = tuple(
            ToolFunction(
                name=tool["function"]["name"],
                description=tool["function"].get("description"),
                parameters=tool["function"].get("parameters"),
            )
            for tool in tools
        )
        named = None
        if isinstance(tool_choice, dict):
            mode: Mode = "named"
            named = tool_choice["function"]["name"]
        else:
            mode = tool_choice or "auto"
        return cls(
            functions=functions,
            mode=mode,
            named=named,
            parallel=parallel_tool_calls is not False,
            parser=parser or DEFAULT_PARSER,
            legacy=legacy,
        )

    @property
    def parses_calls(self) -> bool:
        """Whether the generated text is read for tool calls at all."""
        return self.mode != "none"

    @property
    def max_calls(self) -> int | None:
        return None if self.parallel else 1

    def function(self, name: str) -> ToolFunction:
        return next(f for f in self.functions if f.name == name)

    def as_tools(self) -> list[dict[str, Any]]:
        return [function.as_tool() for function in self.functions]
