"""JSON from clients, read under one set of rules wherever it arrives: an API request's body
(inference/schemas/validation.py) and each line of a batch input file (batches/input_lines.py).

Beyond ``json.loads``: NaN and Infinity are refused (not JSON), nesting is bounded (json's
parser recurses once per level, and code that walks a body would hit the interpreter's limit
further on), and text must be valid Unicode: JSON can escape a lone UTF-16 surrogate
(``"\\ud800"``), which decodes to a str that no encoder, tokenizer, hash or database takes.
"""

from __future__ import annotations

import gc
import json
import re
from typing import Any

# Deeper than any request of the API needs (chat content parts sit at depth 5), and far from
# the interpreter's recursion limit, which code walking the body (templates, tojson) would hit.
MAX_JSON_DEPTH = 64
# How many values the search for a lone surrogate's field looks at before giving up on naming it.
_MAX_WALK = 100_000


class JsonTextError(ValueError):
    """Why the JSON is refused, in words for the client, and the field when one is to blame;
    ``parsed``: what it parsed to, when it did (the refusal is of a value in it)."""

    def __init__(self, message: str, *, param: str | None = None, parsed: Any = None) -> None:
        super().__init__(message)
        self.message, self.param, self.parsed = message, param, parsed


def loads_json(raw: bytes) -> Any:
    """``raw`` parsed, or JsonTextError saying why not."""
    try:
        value = _loads_without_gc(raw)
    except RecursionError as exc:
        raise _too_deep() from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonTextError(f"We could not parse the JSON body of your request: {exc}") from exc
    if nested_deeper_than(raw, MAX_JSON_DEPTH):
        raise _too_deep()
    if has_lone_surrogate(raw):
        path = _lone_surrogate_path(value)
        where = f"`{path}`" if path else "A string in the JSON body"
        raise JsonTextError(
            f"{where} must be valid Unicode text: it holds a lone UTF-16 surrogate (a "
            "\\ud800-\\udfff escape without its pair).",
            param=path,
            parsed=value,
        )
    return value


def is_valid_text(text: str) -> bool:
    """False for a string holding a lone UTF-16 surrogate, which cannot be encoded."""
    if text.isascii():  # constant time: CPython keeps the flag
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _loads_without_gc(raw: bytes) -> Any:
    """``json.loads`` with the cyclic GC paused: it would otherwise scan the growing result
    again and again (5x slower on a body of a million small arrays). JSON holds no cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    finally:
        if enabled:
            gc.enable()


def _too_deep() -> JsonTextError:
    return JsonTextError(
        f"The JSON body of your request is nested deeper than {MAX_JSON_DEPTH} levels."
    )


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


def nested_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the arrays and objects of valid JSON ``raw`` nest more than ``limit`` deep.

    Byte operations only (a Python walk over a million parsed containers takes seconds):
    drop escaped backslashes and escaped quotes, keep only brackets and quotes, drop strings
    (adjacent quotes first: they close an empty string or join two strings with nothing
    between); then each pass removes the innermost ``[]`` and ``{}`` pairs, one level (a
    marker keeps a pass from also removing the pair it uncovers).
    """
    shape = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    shape = _STRING.sub(b"", shape.replace(b'""', b""))
    for _ in range(limit):
        if not shape:
            return False
        shape = shape.replace(b"[]", b"\0").replace(b"{}", b"\0").replace(b"\0", b"")
    return bool(shape)


# JSON's escapes of UTF-16 surrogates: a high one followed by a low one is one character, any
# other a lone surrogate. Escaped backslashes are matched too, so that the scan stays aligned
# on escapes (``\\\\ud800`` is a backslash and the text "ud800").
_SURROGATE_ESCAPES = re.compile(
    rb"\\\\|(\\u[dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def has_lone_surrogate(raw: bytes) -> bool:
    """Whether valid JSON ``raw`` escapes a lone surrogate (a scan of the bytes, no walk)."""
    if b"\\u" not in raw:
        return False
    for match in _SURROGATE_ESCAPES.finditer(raw):
        escaped_backslash = match.group(0) == b"\\\\"
        if not escaped_backslash and not (match.group(1) and match.group(2)):
            return True
    return False


def _lone_surrogate_path(value: Any) -> str | None:
    """The field (``messages[0].content``) of the first string holding a lone surrogate; for
    an object key, the object. None past _MAX_WALK values."""
    budget = _MAX_WALK

    def find(item: Any, path: str) -> str | None:
        nonlocal budget
        budget -= 1
        if budget < 0:
            return None
        if isinstance(item, str):
            return None if is_valid_text(item) else path
        if not isinstance(item, dict | list):
            return None
        for key, child in item.items() if isinstance(item, dict) else enumerate(item):
            if isinstance(key, str) and not is_valid_text(key):
                return path or None
            where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
            found = find(child, where)
            if found is not None:
                return found
        return None

    return find(value, "")
