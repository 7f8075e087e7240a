"""What a Responses request carries beyond its chat generation: what its Response echoes,
the conversation it answers (to store), and where it is stored."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass
class ResponseContext:
    tenant_id: int
    key_prefix: str
    # Every input item the generation answers: the previous response's conversation and
    # output first, then this request's input (items with ids, as input_items lists them).
    input_items: list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    # A conversation (Conversations API) the response continues; ``request_items`` are this
    # request's own input items, which it adds to the conversation with its output.
    conversation_id: str | None = None
    request_items: list[dict[str, Any]] = field(default_factory=list)
    store: bool = True
    background: bool = False  # answered at once, run on by the API process (background.py)
    tools: list[dict[str, Any]] = field(default_factory=list)  # Responses' function tools
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    safety_identifier: str | None = None
    service_tier: str = "default"  # as processed: "flex" in the batch class
    # include "message.output_text.logprobs": the answer's token logprobs, each with
    # ``top_logprobs`` alternatives (echoed as given).
    logprobs: bool = False
    top_logprobs: int = 0
    # The request's ``reasoning`` ({"effort", "summary"}), echoed as given.
    reasoning: dict[str, Any] = field(default_factory=lambda: {"effort": None, "summary": None})
    id: str = field(default_factory=new_response_id)
    created_at: int = field(default_factory=lambda: int(time.time()))
