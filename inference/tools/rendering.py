"""Tools and tool messages as chat template input.

HF chat templates that know tools (Qwen2.5, Qwen3, Llama 3.1, Hermes) take a ``tools``
argument and messages with ``tool_calls`` (arguments as an object) and ``tool`` roles. A
template that never mentions tools (SmolLM2, the demo ChatML) would drop them silently, so
for those the tools are described in a system message, in the format the model's parser
reads, and earlier calls and their results are written as text in that same format.
"""

from __future__ import annotations

import json
from typing import Any

from inference.tools.definitions import ToolSetup


def template_knows_tools(chat_template: str | None) -> bool:
    return bool(chat_template) and "tools" in chat_template


def _arguments_object(arguments: str) -> Any:
    """Templates write ``arguments | tojson``: give them the object, not JSON text."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _native_message(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message.get("name"):
        out["name"] = message["name"]
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": _arguments_object(call["function"]["arguments"]),
                },
            }
            for call in message["tool_calls"]
        ]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("reasoning_content"):
        # An earlier turn's thinking, under each name templates read it by (Qwen3's
        # reasoning_content, gpt-oss's thinking); a template that reads none drops it.
        thinking = message["reasoning_content"]
        out.update(reasoning_content=thinking, reasoning=thinking, thinking=thinking)
    return out


# Per parser: how tools are announced, how a call is written, how a result is given back.
def _hermes_prompt(tools: list[dict[str, Any]]) -> str:
    lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou can call functions to help answer. Their signatures are listed "
        f"inside <tools></tools>:\n<tools>\n{lines}\n</tools>\n\nTo call one, reply with a "
        "JSON object holding the function's name and its arguments inside "
        '<tool_call></tool_call> tags:\n<tool_call>\n{"name": <function name>, '
        '"arguments": <arguments as a JSON object>}\n</tool_call>'
    )


def _hermes_call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {arguments}}}\n</tool_call>'


def _llama3_prompt(tools: list[dict[str, Any]]) -> str:
    lines = "\n\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "You can call functions to help answer. To call one, reply with only a JSON object "
        'of the form {"name": <function name>, "parameters": <arguments as a JSON object>}.'
        f"\n\nThe functions:\n\n{lines}"
    )


def _llama3_call(name: str, arguments: str) -> str:
    return f'{{"name": {json.dumps(name)}, "parameters": {arguments}}}'


FALLBACK_FORMATS = {
    "hermes": (_hermes_prompt, _hermes_call, "\n"),
    "llama3_json": (_llama3_prompt, _llama3_call, "; "),
}


def _fallback_messages(
    messages: list[dict[str, Any]], setup: ToolSetup | None
) -> list[dict[str, Any]]:
    parser = setup.parser if setup is not None else "hermes"
    prompt, write_call, separator = FALLBACK_FORMATS.get(parser, FALLBACK_FORMATS["hermes"])
    out = []
    for message in messages:
        role, content = message["role"], message["content"]
        if message.get("tool_calls"):
            calls = separator.join(
                write_call(c["function"]["name"], c["function"]["arguments"])
                for c in message["tool_calls"]
            )
            content = f"{content}\n{calls}" if content else calls
        elif role == "tool":  # a template without tools may refuse the role: a user turn
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        converted = {"role": role, "content": content}
        if message.get("name") and role != "user":
            converted["name"] = message["name"]
        out.append(converted)
    if setup is not None and setup.mode != "none":
        tools_text = prompt(setup.as_tools())
        if out and out[0]["role"] in ("system", "developer"):
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{tools_text}".lstrip()}
        else:
            out.insert(0, {"role": "system", "content": tools_text})
    return out


def template_input(
    messages: list[dict[str, Any]], setup: ToolSetup | None, chat_template: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(messages, extra template arguments) for validated chat messages and tools.

    Tools are left out with ``tool_choice: "none"``: the model should answer in words.
    """
    has_tool_messages = any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    shows_tools = setup is not None and setup.mode != "none"
    if not (shows_tools or has_tool_messages):
        return [_native_message(m) for m in messages], {}
    if template_knows_tools(chat_template):
        kwargs = {"tools": setup.as_tools()} if shows_tools else {}
        return [_native_message(m) for m in messages], kwargs
    return _fallback_messages(messages, setup), {}
