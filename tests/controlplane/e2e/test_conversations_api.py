"""The Conversations API through the official openai SDK against the served platform
(Daphne, a real engine process on the tiny llama, SQLite): conversations and their items per
tenant, Responses requests that continue one and add to it, and the input-token count."""

from __future__ import annotations

import openai
import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0, "max_output_tokens": 4, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def clients(live_platform):
    db = live_platform.db
    db.manage("create_tenant", "Conv A", "--model", MODEL)
    db.manage("create_tenant", "Conv B", "--model", MODEL)
    return tuple(
        openai.OpenAI(base_url=f"{live_platform.base_url}/v1", api_key=secret, max_retries=0)
        for secret in (db.create_key("Conv A"), db.create_key("Conv B"))
    )


def _texts(items) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items]


def test_a_conversation_keeps_items_and_metadata_per_tenant(clients):
    client, other = clients
    made = client.conversations.create(
        items=[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}],
        metadata={"topic": "greeting"},
    )
    assert made.id.startswith("conv_") and made.object == "conversation"
    assert client.conversations.retrieve(made.id).metadata == {"topic": "greeting"}
    assert client.conversations.update(made.id, metadata={"topic": "x"}).metadata == {"topic": "x"}

    added = client.conversations.items.create(made.id, items=[{"role": "user", "content": "More"}])
    assert [item.id for item in added.data] and added.data[0].type == "message"
    newest_first = client.conversations.items.list(made.id)
    assert _texts(newest_first.data) == [("user", "More"), ("assistant", "Hi!"), ("user", "Hello")]
    oldest_first = client.conversations.items.list(made.id, order="asc", limit=2)
    assert _texts(oldest_first.data) == [("user", "Hello"), ("assistant", "Hi!")]
    assert oldest_first.has_more
    rest = client.conversations.items.list(made.id, order="asc", after=oldest_first.last_id)
    assert _texts(rest.data) == [("user", "More")] and not rest.has_more

    everything = list(client.conversations.items.list(made.id, order="asc", limit=1))
    assert _texts(everything) == [("user", "Hello"), ("assistant", "Hi!"), ("user", "More")]

    first_id = oldest_first.data[0].id
    item = client.conversations.items.retrieve(first_id, conversation_id=made.id)
    assert item.id == first_id and item.content[0].text == "Hello"
    for call in (
        lambda: other.conversations.retrieve(made.id),
        lambda: other.conversations.items.list(made.id),
        lambda: other.conversations.items.retrieve(first_id, conversation_id=made.id),
        lambda: other.conversations.delete(made.id),
        lambda: other.responses.create(model=MODEL, input="Hi", conversation=made.id, **GREEDY),
    ):
        with pytest.raises(openai.NotFoundError):
            call()

    assert client.conversations.items.delete(first_id, conversation_id=made.id).id == made.id
    assert len(client.conversations.items.list(made.id).data) == 2
    assert client.conversations.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(made.id)


def test_responses_continue_a_conversation_and_add_their_turns(clients):
    client, _other = clients
    conversation = client.conversations.create(
        items=[{"role": "user", "content": "My name is Ada."}]
    )
    alone = client.responses.create(model=MODEL, input="What is my name?", **GREEDY)
    first = client.responses.create(
        model=MODEL, input="What is my name?", conversation=conversation.id, **GREEDY
    )
    assert first.conversation.id == conversation.id
    # The conversation's items came first: a longer prompt than the same input alone.
    assert first.usage.input_tokens > alone.usage.input_tokens
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [(i.type, i.role) for i in items] == [
        ("message", "user"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[2].content[0].text == first.output_text

    second = client.responses.create(
        model=MODEL, input="And again?", conversation={"id": conversation.id}, **GREEDY
    )
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert len(client.conversations.items.list(conversation.id).data) == 5
    # The whole conversation is the stored response's input.
    assert len(client.responses.input_items.list(second.id).data) == 4

    streamed = client.responses.create(
        model=MODEL, input="Once more.", conversation=conversation.id, stream=True, **GREEDY
    )
    final = next(event for event in streamed if event.type == "response.incomplete").response
    items = client.conversations.items.list(conversation.id, limit=1).data
    assert items[0].content[0].text == final.output_text  # added before the final event

    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(
            model=MODEL,
            input="x",
            conversation=conversation.id,
            previous_response_id=first.id,
            **GREEDY,
        )
    assert both.value.body["param"] == "conversation"


def test_input_tokens_counts_a_responses_request_without_running_it(clients):
    client, _other = clients
    counted = client.responses.input_tokens.count(
        model=MODEL, input="Tell me about lists.", instructions="Be brief."
    )
    assert counted.object == "response.input_tokens"
    made = client.responses.create(
        model=MODEL, input="Tell me about lists.", instructions="Be brief.", **GREEDY
    )
    assert counted.input_tokens == made.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.input_tokens.count(model="no-such-model", input="Hi")
