"""Usage records name what a client can quote: the id of the answer it got, and the end user
its request named (``user``), through the openai SDK against the served platform."""

from __future__ import annotations

import sqlite3
import time

import openai
import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def client(live_platform):
    db = live_platform.db
    db.manage("create_tenant", "Usage Attribution", "--model", MODEL)
    secret = db.create_key("Usage Attribution")
    return openai.OpenAI(base_url=f"{live_platform.base_url}/v1", api_key=secret, max_retries=0)


def _records(platform, request_ids: list[str]) -> dict[str, tuple]:
    """request id -> (end user, completion tokens), once the usage flush has written all."""
    deadline = time.monotonic() + 20
    while True:
        platform.db.manage("flush_usage")
        with sqlite3.connect(platform.db.path) as conn:
            marks = ",".join("?" * len(request_ids))
            rows = conn.execute(
                "SELECT request_id, end_user, completion_tokens FROM usage_usagerecord "
                f"WHERE request_id IN ({marks})",
                request_ids,
            ).fetchall()
        if len(rows) == len(request_ids) or time.monotonic() > deadline:
            return {request_id: (user, tokens) for request_id, user, tokens in rows}
        time.sleep(0.3)


def test_each_record_names_the_answer_and_the_end_user(live_platform, client):
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=3,
        user="alice@example.com",
        **GREEDY,
    )
    text = client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, **GREEDY)
    response = client.responses.create(
        model=MODEL, input="Hi", max_output_tokens=4, user="bob", **GREEDY
    )
    records = _records(live_platform, [chat.id, text.id, response.id])
    assert records == {
        chat.id: ("alice@example.com", 3),
        text.id: ("", 2),
        response.id: ("bob", 4),
    }
