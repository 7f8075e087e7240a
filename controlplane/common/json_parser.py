"""DRF's parser for the JSON bodies of DRF views (the management API), under the rules the
OpenAI-compatible API applies to its own (json_text): bounded nesting, valid Unicode, no NaN.
DRF's JSONParser would let a body nested 5,000 deep reach json's recursion (a 500)."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from controlplane.common.json_text import JsonTextError, loads_json


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return loads_json(stream.read() if stream is not None else b"")
        except JsonTextError as exc:
            raise ParseError(exc.message) from exc
