"""Planning refuses cheaply first: a tenant over its request limits before the model is looked
up, a prompt too long to fit before it is tokenized, too many sequences before anything."""

from __future__ import annotations

import pytest

from controlplane.access.admission import admit
from controlplane.access.principals import AccessError
from controlplane.access.ratelimit import Limits
from engine.text.tokenizer import ChatTokenizer
from inference.errors import ApiError
from inference.generation.planning import prepare_chat, prepare_completion
from tests.support.generation_factories import MAX_MODEL_LEN, MODEL, make_principal

USER = [{"role": "user", "content": "Hi"}]
pytest_db = pytest.mark.django_db(transaction=True)


async def test_a_tenant_out_of_requests_gets_its_429_before_the_model_is_looked_up(
    redis_client,
):
    principal = make_principal(tenant_id=7, limits=Limits(requests_per_minute=1))
    await admit(principal, model=MODEL, prompt_tokens=1, max_tokens=1)
    # No such model (and no database access in this test): the limits answer first.
    with pytest.raises(AccessError) as info:
        await prepare_chat(principal, {"model": "nope", "messages": USER})
    assert info.value.status == 429
    assert info.value.headers["x-ratelimit-remaining-requests"] == "0"


@pytest_db
async def test_messages_longer_than_the_context_could_hold_are_never_tokenized(
    served, monkeypatch, settings
):
    settings.PROMPT_MAX_CHARS_PER_TOKEN = 4
    encoded = []
    original = ChatTokenizer.encode
    monkeypatch.setattr(
        ChatTokenizer,
        "encode",
        lambda self, text, **kw: encoded.append(text) or original(self, text, **kw),
    )
    raw = {"model": MODEL, "messages": [{"role": "user", "content": "x" * (MAX_MODEL_LEN * 4 + 1)}]}
    with pytest.raises(ApiError) as info:
        await prepare_chat(make_principal(), raw)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "messages")
    assert "characters" in info.value.message
    assert encoded == []
    raw = {"model": MODEL, "prompt": [[1] * MAX_MODEL_LEN]}
    with pytest.raises(ApiError) as info:
        await prepare_completion(make_principal(), raw)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "prompt")


async def test_too_many_sequences_are_refused_before_any_lookup(settings):
    settings.API_MAX_SEQUENCES_PER_REQUEST = 8
    raw = {"model": MODEL, "prompt": ["a", "b", "c"], "n": 3}
    with pytest.raises(ApiError) as info:
        await prepare_completion(make_principal(), raw)
    assert (info.value.status, info.value.param) == (400, "n")
