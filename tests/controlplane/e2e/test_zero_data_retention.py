"""A tenant with zero data retention through the openai SDK against the served platform:
nothing it sends or gets is kept (store treated as false), what cannot work without keeping
data is refused with a clear error, and another tenant beside it keeps its own as before."""

from __future__ import annotations

import sqlite3

import openai
import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}
ASK = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def clients(live_platform):
    db = live_platform.db
    db.manage("create_tenant", "Private", "--model", MODEL, "--zero-data-retention")
    db.manage("create_tenant", "Ordinary", "--model", MODEL)
    return tuple(
        openai.OpenAI(base_url=f"{live_platform.base_url}/v1", api_key=secret, max_retries=0)
        for secret in (db.create_key("Private"), db.create_key("Ordinary"))
    )


def _stored_rows(platform) -> int:
    with sqlite3.connect(platform.db.path) as conn:
        return sum(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in (
                "batches_storedfile",
                "chat_store_storedchatcompletion",
                "responses_storedresponse",
                "responses_conversation",
            )
        )


def test_nothing_is_kept_and_what_needs_keeping_is_refused(live_platform, clients):
    private, ordinary = clients
    before = _stored_rows(live_platform)
    chat = private.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=3, store=True, metadata={"a": "b"}, **GREEDY
    )
    response = private.responses.create(model=MODEL, input="Hi", max_output_tokens=3, **GREEDY)
    assert chat.choices and response.output_text and response.store is False
    assert _stored_rows(live_platform) == before
    for call in (
        lambda: private.chat.completions.retrieve(chat.id),
        lambda: private.responses.retrieve(response.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert private.chat.completions.list().data == []

    refused = [
        ("background", {"background": True}),
        ("previous_response_id", {"previous_response_id": response.id}),
        ("conversation", {"conversation": "conv_anything"}),
    ]
    for param, extra in refused:
        with pytest.raises(openai.BadRequestError) as got:
            private.responses.create(
                model=MODEL, input="Hi", max_output_tokens=3, **extra, **GREEDY
            )
        assert got.value.body["param"] == param and "zero data retention" in got.value.message
    for keeping in (
        private.conversations.create,
        lambda: private.files.create(file=("lines.jsonl", b"{}\n"), purpose="batch"),
        lambda: private.batches.create(
            input_file_id="file-any", endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.PermissionDeniedError) as got:
            keeping()
        assert got.value.body["code"] == "zero_data_retention"
    assert private.files.list().data == []

    kept = ordinary.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=3, store=True, **GREEDY
    )
    assert ordinary.chat.completions.retrieve(kept.id).id == kept.id
    assert _stored_rows(live_platform) == before + 1
