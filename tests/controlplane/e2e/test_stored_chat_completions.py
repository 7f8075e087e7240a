"""Stored chat completions through the official openai SDK against the served platform
(Daphne, a real engine process on the tiny llama, SQLite): ``store: true`` keeps a completion,
streamed or not, for list, retrieve, update, delete and messages; nothing else is kept, and
another tenant reaches none of it."""

from __future__ import annotations

import openai
import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0, "max_tokens": 5, "extra_body": {"ignore_eos": True}}
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List fruit."}]


@pytest.fixture(scope="module")
def clients(live_platform):
    db = live_platform.db
    db.manage("create_tenant", "Store A", "--model", MODEL)
    db.manage("create_tenant", "Store B", "--model", MODEL)
    return tuple(
        openai.OpenAI(base_url=f"{live_platform.base_url}/v1", api_key=secret, max_retries=0)
        for secret in (db.create_key("Store A"), db.create_key("Store B"))
    )


def test_a_stored_completion_is_retrieved_listed_updated_and_deleted(clients):
    client, other = clients
    made = client.chat.completions.create(
        model=MODEL, messages=ASK, store=True, metadata={"run": "r1", "team": "a"}, **GREEDY
    )
    plain = client.chat.completions.create(model=MODEL, messages=ASK, **GREEDY)

    got = client.chat.completions.retrieve(made.id)
    assert got.choices[0].message.content == made.choices[0].message.content
    assert got.usage == made.usage and got.model == MODEL
    assert got.metadata == {"run": "r1", "team": "a"}
    listed = [c.id for c in client.chat.completions.list(metadata={"run": "r1"})]
    assert listed == [made.id]
    assert made.id in [c.id for c in client.chat.completions.list(model=MODEL)]
    assert client.chat.completions.list(metadata={"run": "r1", "team": "b"}).data == []

    messages = client.chat.completions.messages.list(made.id)
    assert [(m.id, m.role, m.content) for m in messages.data] == [
        (f"{made.id}-0", "system", "Be brief."),
        (f"{made.id}-1", "user", "List fruit."),
    ]
    newest_first = client.chat.completions.messages.list(made.id, order="desc", limit=1)
    assert [m.content for m in newest_first.data] == ["List fruit."] and newest_first.has_more

    updated = client.chat.completions.update(made.id, metadata={"run": "r2"})
    assert updated.metadata == {"run": "r2"}
    assert [c.id for c in client.chat.completions.list(metadata={"run": "r2"})] == [made.id]

    for call in (
        lambda: client.chat.completions.retrieve(plain.id),  # not asked to be stored
        lambda: other.chat.completions.retrieve(made.id),  # another tenant's
        lambda: other.chat.completions.delete(made.id),
        lambda: other.chat.completions.messages.list(made.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert other.chat.completions.list().data == []

    deleted = client.chat.completions.delete(made.id)
    assert deleted.deleted and deleted.id == made.id
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(made.id)


def test_a_streamed_completion_is_stored_whole_before_the_stream_ends(clients):
    client, _other = clients
    whole = client.chat.completions.create(model=MODEL, messages=ASK, **GREEDY)
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, store=True, stream=True, **GREEDY
    )
    chunks = list(stream)  # the SDK reads to data: [DONE]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    stored = client.chat.completions.retrieve(chunks[0].id)
    assert stored.object == "chat.completion" and stored.metadata == {}
    [choice] = stored.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == streamed == whole.choices[0].message.content
    assert choice.finish_reason == "length"
    assert stored.usage.completion_tokens == 5
    assert stored.usage.prompt_tokens == whole.usage.prompt_tokens


def test_bad_metadata_and_list_parameters_are_400s(clients):
    client, _other = clients
    cases = [
        lambda: client.chat.completions.create(
            model=MODEL, messages=ASK, store=True, metadata={"k": 1}, **GREEDY
        ),
        lambda: client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            store=True,
            metadata={f"k{i}": "v" for i in range(17)},
            **GREEDY,
        ),
        lambda: client.chat.completions.create(
            model=MODEL, messages=ASK, store=True, metadata={"k" * 65: "v"}, **GREEDY
        ),
        lambda: client.chat.completions.list(limit=0),
        lambda: client.chat.completions.list(order="sideways"),
        lambda: client.chat.completions.list(after="chatcmpl-nothing"),
    ]
    for call in cases:
        with pytest.raises(openai.BadRequestError) as got:
            call()
        assert got.value.body["param"].split(".")[0] in ("metadata", "limit", "order", "after")
    # Without store, metadata is not kept and not checked (clients put their own there).
    ignored = client.chat.completions.create(
        model=MODEL, messages=ASK, metadata={"tags": ["a", "b"], "n": 1}, **GREEDY
    )
    assert ignored.choices


def test_the_sdk_pages_through_stored_completions_oldest_first(clients):
    client, _other = clients
    made = [
        client.chat.completions.create(
            model=MODEL, messages=ASK, store=True, metadata={"run": "paging"}, **GREEDY
        ).id
        for _ in range(3)
    ]
    pages = client.chat.completions.list(metadata={"run": "paging"}, limit=2)
    assert [c.id for c in pages.data] == made[:2] and pages.has_more
    assert [c.id for c in pages] == made  # the SDK follows the cursor to the end
    newest = client.chat.completions.list(metadata={"run": "paging"}, order="desc", limit=2)
    assert [c.id for c in newest] == made[::-1]
