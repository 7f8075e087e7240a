"""Matching prompts against declared shared prefixes: the index, the planner's use of it, and
what reaches the engine request (salts derived on the server, a client salt only narrows)."""

from __future__ import annotations

import logging

import pytest
from asgiref.sync import sync_to_async

from controlplane.shared_prefixes.services import shared_prefix_create, shared_prefix_update
from inference.generation.planning import prepare_chat, prepare_completion
from inference.generation.shared_prefixes import HEAD, SharedPrefixIndex, SharedPrefixMatch
from tests.support.generation_factories import EMBEDDING_MODEL, MODEL, make_principal

SYSTEM = {"role": "system", "content": "You are the support bot of Example Corp. Be brief."}
SYSTEM_PROMPT = f"<|im_start|>system\n{SYSTEM['content']}<|im_end|>\n"


def match(label: str, n: int) -> SharedPrefixMatch:
    return SharedPrefixMatch(label, f"shared:{label}", n)


def test_the_index_finds_the_longest_declared_prefix_a_prompt_starts_with():
    long = list(range(40))
    index = SharedPrefixIndex(
        [(long[:20], match("short", 20)), (long, match("long", 40)), ([7, 8], match("tiny", 2))]
    )
    assert index.match([*long, 99]).label == "long"
    assert index.match(long).label == "long"  # the whole prompt may be the prefix
    assert index.match([*long[:30], 99]).label == "short"
    assert index.match([7, 8, 9]).label == "tiny"
    # Prompts that share the head but not the whole prefix, or are shorter: no match.
    assert index.match(long[:19]) is None
    assert index.match([0, *long]) is None
    assert index.match([]) is None
    assert len(long[:20]) >= HEAD and not SharedPrefixIndex([])


pytest_db = pytest.mark.django_db(transaction=True)


def chat(*messages, **fields):
    return {"model": MODEL, "messages": list(messages), "max_tokens": 4, **fields}


@pytest_db
async def test_a_chat_starting_with_the_declared_system_prompt_matches_for_every_tenant(
    served, caplog
):
    await _declare(name="support", messages=[SYSTEM], model_names=[MODEL])
    body = chat(SYSTEM, {"role": "user", "content": "Where is my order?"})
    caplog.set_level(logging.INFO, logger="inference.generation.shared_prefixes")
    alice, _tok = await prepare_chat(make_principal("alice", tenant_id=1), body)
    bob, tokenizer = await prepare_chat(make_principal("bob", tenant_id=2), body)
    num_tokens = len(tokenizer.encode(SYSTEM_PROMPT))
    (a,), (b,) = alice.engine_requests(), bob.engine_requests()
    assert a.message.shared_prefix_tokens == b.message.shared_prefix_tokens == num_tokens
    assert a.message.shared_prefix_salt == b.message.shared_prefix_salt
    assert a.message.shared_prefix_salt.startswith("shared:")
    assert a.message.cache_salt != b.message.cache_salt  # the rest stays per tenant
    assert a.message.prompt_token_ids[:num_tokens] == tokenizer.encode(SYSTEM_PROMPT)
    assert f"{alice.request_id}: shared prefix support v1 matched ({num_tokens} tokens" in (
        caplog.text
    )


@pytest_db
async def test_no_match_for_other_prompts_other_models_a_client_salt_or_a_deactivated_prefix(
    served,
):
    prefix = await _declare(name="support", messages=[SYSTEM], model_names=[MODEL])
    user = {"role": "user", "content": "Hi"}
    other_system = {"role": "system", "content": SYSTEM["content"] + "!"}
    for body in (
        chat(other_system, user),
        chat(user, SYSTEM),
        chat(SYSTEM, user, cache_salt="my-own-salt"),  # narrowed by the client: nothing shared
    ):
        plan, _tokenizer = await prepare_chat(make_principal(), body)
        (request,) = plan.engine_requests()
        assert (request.message.shared_prefix_salt, request.message.shared_prefix_tokens) == (
            "",
            0,
        )
    plan, _tokenizer = await prepare_chat(make_principal(), chat(SYSTEM, user))
    assert plan.shared_prefixes[0].label == "support v1"
    await _update(prefix=prefix, is_active=False)
    plan, _tokenizer = await prepare_chat(make_principal(), chat(SYSTEM, user))
    assert not any(plan.shared_prefixes)


@pytest_db
async def test_a_prefix_declared_for_another_model_does_not_apply(served):
    await _declare(name="elsewhere", messages=[SYSTEM], model_names=[EMBEDDING_MODEL])
    plan, _tokenizer = await prepare_chat(
        make_principal(), chat(SYSTEM, {"role": "user", "content": "Hi"})
    )
    assert not any(plan.shared_prefixes)


@pytest_db
async def test_a_text_prefix_matches_each_completion_prompt_that_starts_with_it(served):
    await _declare(name="preamble", kind="text", text="Once upon a time, in a land far away,")
    body = {
        "model": MODEL,
        "prompt": ["Once upon a time, in a land far away, a dragon", "Unrelated prompt"],
        "max_tokens": 2,
    }
    plan, tokenizer = await prepare_completion(make_principal(), body)
    first, second = plan.engine_requests()
    expected = tokenizer.encode("Once upon a time, in a land far away,", add_special_tokens=True)
    assert first.message.shared_prefix_tokens == len(expected)
    assert first.message.prompt_token_ids[: len(expected)] == expected
    assert second.message.shared_prefix_tokens == 0


_declare = sync_to_async(shared_prefix_create)
_update = sync_to_async(shared_prefix_update)
