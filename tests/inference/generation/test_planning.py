"""From a request body to a GenerationPlan: token budgets, choices, stops, salts, sampling."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from controlplane.adapters.selectors import AdapterRoute
from controlplane.catalog.cache import catalog_cache
from controlplane.deployments.models import ServedModel
from engine import protocol
from engine.protocol import SamplingOptions
from engine.text.tokenizer import ChatTokenizer
from inference.catalog import ModelEntry
from inference.errors import ApiError
from inference.generation.planning import (
    SERIALIZERS,
    plan_chat,
    plan_completion,
    prepare_chat,
    prepare_completion,
)
from inference.schemas.validation import validate_body
from tests.support.generation_factories import EMBEDDING_MODEL, MAX_MODEL_LEN, MODEL, make_principal

CONTEXT = MAX_MODEL_LEN
USER = [{"role": "user", "content": "Hi"}]
CHAT_PROMPT = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer(tiny_llama) -> ChatTokenizer:
    return ChatTokenizer(tiny_llama)


@pytest.fixture(scope="module")
def entry(tiny_llama) -> ModelEntry:
    return ModelEntry(MODEL, str(tiny_llama), CONTEXT, created=0, is_embedding=False)


@pytest.fixture
def plan(tokenizer, entry):
    """``plan(kind, **body)``: the body validated as the API does, then planned."""

    def make(kind, *, principal=None, model_entry=None, **body):
        body = validate_body(SERIALIZERS[kind], {"model": MODEL, **body})
        plan_for = plan_chat if kind == "chat" else plan_completion
        return plan_for(principal or make_principal(), body, model_entry or entry, tokenizer)

    return make


def sent_to_engine(sampling: SamplingOptions) -> dict:
    """The sampling fields on the wire (defaults are left out of the message)."""
    return msgspec.to_builtins(sampling)


# Token budgets ------------------------------------------------------------------------------


def test_chat_renders_the_template_and_may_fill_the_context(plan, tokenizer):
    chat = plan("chat", messages=USER)
    prompt_ids = tokenizer.encode(CHAT_PROMPT)
    assert chat.prompts == [(CHAT_PROMPT, prompt_ids)]
    assert chat.prompt_tokens == len(prompt_ids)
    assert chat.sampling.max_tokens == CONTEXT - len(prompt_ids)


def test_chat_without_max_tokens_stops_at_the_configured_default(plan, settings):
    settings.CHAT_DEFAULT_MAX_TOKENS = 5
    assert plan("chat", messages=USER).sampling.max_tokens == 5
    assert plan("chat", messages=USER, max_tokens=9).sampling.max_tokens == 9


def test_a_responses_default_of_zero_leaves_the_whole_context(plan, settings, tokenizer, entry):
    """The Responses API's default (RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS 0): OpenAI's, since
    agent frameworks fail on a response cut short."""
    settings.CHAT_DEFAULT_MAX_TOKENS = 5
    body = validate_body(SERIALIZERS["chat"], {"model": MODEL, "messages": USER})
    planned = plan_chat(make_principal(), body, entry, tokenizer, default_max_tokens=0)
    assert planned.sampling.max_tokens == CONTEXT - planned.prompt_tokens
    capped = plan_chat(make_principal(), body, entry, tokenizer, default_max_tokens=7)
    assert capped.sampling.max_tokens == 7


def test_chat_max_completion_tokens_wins_over_max_tokens(plan):
    assert plan("chat", messages=USER, max_tokens=9).sampling.max_tokens == 9
    chat = plan("chat", messages=USER, max_tokens=9, max_completion_tokens=4)
    assert chat.sampling.max_tokens == 4


def test_chat_asking_past_the_context_is_a_400_naming_the_messages(plan):
    with pytest.raises(ApiError) as info:
        plan("chat", messages=USER, max_tokens=CONTEXT)
    error = info.value
    assert (error.status, error.param, error.code) == (400, "messages", "context_length_exceeded")
    assert f"maximum context length is {CONTEXT} tokens" in error.message


def test_completion_defaults_to_16_tokens_as_openai_does(plan):
    assert plan("completion", prompt="Once upon").sampling.max_tokens == 16


def test_completion_default_shrinks_to_what_the_context_leaves(plan):
    completion = plan("completion", prompt=[5] * (CONTEXT - 5))
    assert completion.sampling.max_tokens == 5


def test_completion_longest_prompt_decides_whether_it_fits(plan):
    with pytest.raises(ApiError) as info:
        plan("completion", prompt=["short", "word " * CONTEXT])
    assert (info.value.status, info.value.param) == (400, "prompt")


def test_completion_prompt_of_token_ids_is_taken_as_is(plan, tokenizer):
    ids = tokenizer.encode("Hello world")
    # Its text is decoded only for echo, the one thing that shows it.
    assert plan("completion", prompt=ids).prompts == [("", ids)]
    assert plan("completion", prompt=ids, echo=True).prompts == [("Hello world", ids)]


def test_completion_token_id_outside_the_vocabulary_is_a_400(plan, tokenizer):
    with pytest.raises(ApiError) as info:
        plan("completion", prompt=[5, tokenizer.vocab_size])
    assert (info.value.status, info.value.param) == (400, "prompt")


# Choices and stops --------------------------------------------------------------------------


def test_completion_choices_are_n_per_prompt(plan, tokenizer):
    completion = plan("completion", prompt=["Once", "Twice upon"], n=3)
    assert completion.num_choices == 6
    assert completion.sampling.n == 3
    expected = sum(
        len(tokenizer.encode(p, add_special_tokens=True)) for p in ["Once", "Twice upon"]
    )
    assert completion.prompt_tokens == expected


def test_stop_is_always_a_tuple_of_strings(plan):
    assert plan("chat", messages=USER, stop="\n").output.stop == ("\n",)
    assert plan("chat", messages=USER, stop=["END", "", "###"]).output.stop == ("END", "###")
    assert plan("completion", prompt="x").output.stop == ()


# Cache salt and request identity ------------------------------------------------------------


def test_cache_salt_is_bound_to_the_tenant(plan):
    acme, other = make_principal("acme", tenant_id=1), make_principal("globex", tenant_id=2)
    acme_salt = plan("chat", messages=USER, principal=acme).cache_salt
    assert plan("chat", messages=USER, principal=acme).cache_salt == acme_salt
    assert plan("chat", messages=USER, principal=other).cache_salt != acme_salt
    # A client salt splits its own tenant's cache; the same one never joins another tenant's.
    mine = plan("chat", messages=USER, principal=acme, cache_salt="user-7").cache_salt
    theirs = plan("chat", messages=USER, principal=other, cache_salt="user-7").cache_salt
    assert len({acme_salt, mine, theirs}) == 3
    assert acme.cache_salt not in {acme_salt, mine}


def test_engine_requests_carry_the_tenants_opaque_id_weight_and_class(plan):
    principal = dataclasses.replace(
        make_principal("globex", tenant_id=7), share_weight=3, service_class="batch"
    )
    (request,) = plan("chat", messages=USER, principal=principal).engine_requests()
    message = request.message
    assert (message.tenant, message.weight, message.service_class) == ("t7", 3.0, "batch")
    # The engines (and their logs) never see the tenant's name or salt.
    wire = protocol.encode(message)
    assert b"globex" not in wire and principal.cache_salt.encode() not in wire


def test_service_tier_flex_runs_the_request_in_the_batch_class(plan):
    (request,) = plan("chat", messages=USER, service_tier="flex").engine_requests()
    assert request.message.service_class == "batch"
    # Any other tier is the tenant's own class: "priority" lifts no tenant above it.
    batch_tenant = dataclasses.replace(make_principal("globex", tenant_id=7), service_class="batch")
    for tier, principal, expected in (
        ("priority", make_principal("acme", tenant_id=1), "interactive"),
        ("priority", batch_tenant, "batch"),
        ("auto", make_principal("acme", tenant_id=1), "interactive"),
    ):
        planned = plan("chat", messages=USER, service_tier=tier, principal=principal)
        assert planned.service_class == expected
        assert planned.service_tier == ("flex" if expected == "batch" else "default")
    with pytest.raises(ApiError) as refused:
        plan("chat", messages=USER, service_tier="turbo")
    assert refused.value.param == "service_tier"


def test_plan_names_its_tenant_and_a_fresh_request_id(plan):
    first = plan("chat", messages=USER, principal=make_principal("globex", tenant_id=2))
    second = plan("chat", messages=USER)
    assert (first.tenant, second.tenant) == ("globex", "acme")
    assert first.request_id.startswith("chatcmpl-")
    assert first.request_id != second.request_id
    assert plan("completion", prompt="x").request_id.startswith("cmpl-")


def test_adapter_entry_runs_on_its_base_model(plan, entry):
    route = AdapterRoute(name="pirate", base_model=MODEL, checksum="abc", path="/lora", created=0)
    adapter_entry = ModelEntry(
        "pirate", entry.path, CONTEXT, created=0, is_embedding=False, adapter=route
    )
    chat = plan("chat", messages=USER, model_entry=adapter_entry)
    assert (chat.model, chat.engine_model, chat.adapter) == ("pirate", MODEL, route)


# Sampling -----------------------------------------------------------------------------------


def test_sampling_fields_left_out_take_the_protocol_defaults(plan):
    completion = plan("completion", prompt="Once upon")
    assert completion.sampling == SamplingOptions(max_tokens=16)
    assert sent_to_engine(completion.sampling) == {}  # 16 is the default itself


def test_sampling_fields_sent_are_passed_on_unchanged(plan):
    chat = plan(
        "chat",
        messages=USER,
        max_tokens=8,
        temperature=0.0,
        top_p=0.5,
        top_k=0,
        seed=0,
        presence_penalty=0.5,
        stop_token_ids=[3],
        min_tokens=2,
        ignore_eos=True,
        logit_bias={"5": -100, "6": 1.5},
        allowed_token_ids=[5, 6, 7],
    )
    assert sent_to_engine(chat.sampling) == {
        "max_tokens": 8,
        "temperature": 0.0,
        "top_p": 0.5,
        "top_k": 0,
        "seed": 0,
        "presence_penalty": 0.5,
        "stop_token_ids": [3],
        "min_tokens": 2,
        "ignore_eos": True,
        "logit_bias": {5: -100.0, 6: 1.5},
        "allowed_token_ids": [5, 6, 7],
    }


@pytest.mark.parametrize("top_k", [-1, 0, 1, 40])
def test_top_k_is_passed_through_as_sent(plan, top_k):
    assert plan("completion", prompt="x", top_k=top_k).sampling.top_k == top_k


def test_min_tokens_above_max_tokens_is_a_400_naming_min_tokens(plan):
    with pytest.raises(ApiError) as info:
        plan("chat", messages=USER, max_tokens=4, min_tokens=5)
    assert (info.value.status, info.value.param) == (400, "min_tokens")
    # Against the completions default of 16 too.
    with pytest.raises(ApiError) as info:
        plan("completion", prompt="x", min_tokens=17)
    assert (info.value.status, info.value.param) == (400, "min_tokens")


def test_chat_logprobs_ask_the_engine_for_top_logprobs(plan):
    chat = plan("chat", messages=USER, logprobs=True, top_logprobs=3)
    assert (chat.logprobs, chat.sampling.logprobs) == (True, 3)
    chat = plan("chat", messages=USER, logprobs=True)
    assert (chat.logprobs, chat.sampling.logprobs) == (True, 0)
    chat = plan("chat", messages=USER)
    assert (chat.logprobs, chat.sampling.logprobs) == (False, None)


def test_completion_logprobs_zero_still_returns_logprobs(plan):
    completion = plan("completion", prompt="x", logprobs=0)
    assert (completion.logprobs, completion.sampling.logprobs) == (True, 0)
    assert plan("completion", prompt="x").logprobs is False


# Output options -----------------------------------------------------------------------------


def test_stream_options_and_output_flags(plan):
    streamed = plan(
        "completion",
        prompt="x",
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        echo=True,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        priority=-3,
    )
    assert (streamed.stream, streamed.include_usage, streamed.continuous_usage) == (
        True,
        True,
        True,
    )
    assert (streamed.echo, streamed.output.include_stop_str_in_output) == (True, True)
    assert (streamed.output.skip_special_tokens, streamed.priority) == (False, -3)
    plain = plan("chat", messages=USER)
    assert (plain.stream, plain.include_usage, plain.continuous_usage, plain.echo) == (
        False,
        False,
        False,
        False,
    )
    assert (plain.output.skip_special_tokens, plain.priority) == (True, 0)


# From the raw body, with the model looked up ------------------------------------------------

pytest_db = pytest.mark.django_db(transaction=True)


@pytest_db
async def test_prepare_generation_plans_for_the_served_model(served):
    raw = {"model": MODEL, "messages": USER, "stream": True}
    plan, tokenizer = await prepare_chat(make_principal(), raw)
    assert (plan.model, plan.engine_model, plan.stream) == (MODEL, MODEL, True)
    assert plan.prompts == [(CHAT_PROMPT, tokenizer.encode(CHAT_PROMPT))]


@pytest_db
async def test_prepare_generation_refuses_an_embedding_model(served):
    raw = {"model": EMBEDDING_MODEL, "prompt": "x"}
    with pytest.raises(ApiError) as info:
        await prepare_completion(make_principal(), raw)
    assert (info.value.status, info.value.param) == (400, "model")
    assert "/v1/embeddings" in info.value.message


@pytest_db
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stop_token_ids", [3, 50_000]),
        ("allowed_token_ids", [3, 50_000]),
        ("logit_bias", {"3": 1, "50000": -100}),
    ],
)
async def test_prepare_generation_refuses_token_ids_outside_the_vocabulary(served, field, value):
    for kind, prepare in (("prompt", prepare_completion), ("messages", prepare_chat)):
        body = {"prompt": "x"} if kind == "prompt" else {"messages": USER}
        raw = {"model": MODEL, **body, field: value}
        with pytest.raises(ApiError) as info:
            await prepare(make_principal(), raw)
        assert (info.value.status, info.value.param) == (400, field)
        assert "50000 is out of vocabulary" in info.value.message


@pytest_db
async def test_prepare_generation_refuses_chat_on_a_completions_only_model(served):
    await ServedModel.objects.acreate(
        name="base", path=served.path, architecture="LlamaForCausalLM", completions_only=True
    )
    catalog_cache.invalidate_local()
    with pytest.raises(ApiError) as info:
        await prepare_chat(make_principal(), {"model": "base", "messages": USER})
    assert (info.value.status, info.value.param) == (400, "model")
    assert "/v1/completions only" in info.value.message
    raw = {"model": "base", "prompt": "Once"}
    plan, _tokenizer = await prepare_completion(make_principal(), raw)
    assert plan.model == "base"


async def test_prepare_generation_names_the_invalid_field_before_any_lookup():
    raw = {"model": MODEL, "messages": USER, "temperature": 5}
    with pytest.raises(ApiError) as info:
        await prepare_chat(make_principal(), raw)
    assert (info.value.status, info.value.param) == (400, "temperature")
