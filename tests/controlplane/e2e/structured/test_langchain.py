"""langchain-openai's ChatOpenAI against the server: structured output and bound tools, as a
LangChain application uses them (default settings, the server's default max_tokens)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from tests.support.tools_stack import RANDOM, SMOLLM2

# SmolLM2 on a CPU: twenty constrained generations at once take a while on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Pet(BaseModel):
    """A pet."""

    name: str = Field(max_length=16, description="the pet's name")
    species: str = Field(max_length=16)
    age: int = Field(ge=0, le=30)


class GetWeather(BaseModel):
    """Get the weather in a city."""

    city: str = Field(max_length=20)
    unit: str = Field(pattern="^(celsius|fahrenheit)$")


def chat(stack, model: str):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model,
        base_url=f"{stack.base_url}/v1",
        api_key=stack.api_key,
        max_retries=0,
        timeout=600,
    )


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(stack, method):
    structured = chat(stack, SMOLLM2).with_structured_output(Pet, method=method)
    pet = structured.invoke("Invent a pet for me.")
    assert isinstance(pet, Pet)


@pytest.mark.parametrize("model", [SMOLLM2, RANDOM])
def test_bind_tools_named_and_any(stack, model):
    for choice in ("GetWeather", "any"):
        message = (
            chat(stack, model)
            .bind_tools([GetWeather], tool_choice=choice)
            .invoke("What's the weather in Rome?")
        )
        (call,) = message.tool_calls[:1]
        assert call["name"] == "GetWeather"
        GetWeather.model_validate(call["args"])
        assert call["id"].startswith("call_")
