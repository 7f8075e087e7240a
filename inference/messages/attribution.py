"""Claude Code's attribution line, dropped from the system prompt so prefix caching works.

Claude Code (2.1.36 and later) opens its system prompt with a line of the form

    x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;

as its own text block (or the first line of a string ``system``). ``cch`` and the version's
suffix are hashes of the conversation that change from turn to turn, and the line comes
before everything else, so every turn's prompt differs from the previous one at its first
tokens and no KV block of the conversation is ever reused. The line means nothing to the
model. Served models drop it by default (``ServedModel.drop_attribution_header``).
"""

from __future__ import annotations

ATTRIBUTION_PREFIX = "x-anthropic-billing-header:"


def without_attribution(system: list[str]) -> list[str]:
    """The system texts (one per block) without the attribution line at their start; a block
    that was only that line goes altogether."""
    out = []
    for index, text in enumerate(system):
        if index == 0 and text.lstrip().lower().startswith(ATTRIBUTION_PREFIX):
            _line, _newline, text = text.lstrip().partition("\n")
            if not text.strip():
                continue
        out.append(text)
    return out
