"""Batch API input files: JSONL lines, a chat line, an uploaded file."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile


def jsonl(lines: list[dict]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_line(custom_id: str, url: str = "/v1/chat/completions") -> dict:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def upload(content: bytes, name: str = "in.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/jsonl")
