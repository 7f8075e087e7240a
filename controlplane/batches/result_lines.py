"""The lines of a batch's output and error files, in OpenAI's format.

A request that ran and answered 200 goes to the output file; one answered with an error status
goes to the error file with that status and OpenAI's error body; a line that could not be run at
all (bad JSON, wrong url, the batch cancelled or expired first) has ``response: null`` and an
``error`` with a code and message.
"""

from __future__ import annotations

import json
import secrets


def _line(custom_id: str | None, response: dict | None, error: dict | None) -> str:
    record = {
        "id": f"batch_req_{secrets.token_hex(12)}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def response_line(custom_id: str, *, status_code: int, request_id: str, body: dict) -> str:
    response = {"status_code": status_code, "request_id": request_id, "body": body}
    return _line(custom_id, response, None)


def error_line(custom_id: str | None, *, code: str, message: str) -> str:
    return _line(custom_id, None, {"code": code, "message": message})
