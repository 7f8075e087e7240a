"""Which tool-call format a served model writes: the names the API's parsers go by
(inference/tools/parsers), and a default for a checkpoint."""

from __future__ import annotations

HERMES, LLAMA3_JSON = "hermes", "llama3_json"

TOOL_PARSER_CHOICES = [
    (HERMES, "Hermes: <tool_call>{json}</tool_call> (Qwen2.5, Qwen3, Hermes, ChatML models)"),
    (LLAMA3_JSON, 'Llama 3.1 JSON: {"name": ..., "parameters": ...}'),
]


def default_tool_parser(architecture: str, chat_template: str | None = None) -> str:
    """The format a checkpoint most likely writes calls in.

    Its chat template says best (the tags it renders calls with); otherwise the architecture:
    Llama 3 models write JSON, Qwen and the rest Hermes blocks. A Llama-architecture model
    with a ChatML template (SmolLM2) is not a Llama 3 and gets Hermes.
    """
    if chat_template:
        if "<tool_call>" in chat_template:
            return HERMES
        if "<|python_tag|>" in chat_template or "<|start_header_id|>" in chat_template:
            return LLAMA3_JSON
        if architecture.startswith("Llama"):
            return HERMES
    return LLAMA3_JSON if architecture.startswith("Llama") else HERMES
