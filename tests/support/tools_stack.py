"""The served stack for structured outputs and tool calls as its tests see it: the two
models' names and the handle the ``stack`` fixture yields."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.shared_database import FileDatabase

PREFIX = "sotools"
SMOLLM2 = "smollm2-135m-instruct"
RANDOM = "tiny-random"


@dataclass
class ToolsStack:
    base_url: str
    api_key: str
    db: FileDatabase

    def sdk(self, **kwargs):
        import openai

        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0, **kwargs
        )

    def async_sdk(self, **kwargs):
        import openai

        return openai.AsyncOpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0, **kwargs
        )
