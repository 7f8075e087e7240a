"""The official openai and anthropic SDKs pointed at a platform a test started: a mixin for
the handles fixtures yield, which carry ``base_url`` and ``api_key``."""

from __future__ import annotations


class SdkClients:
    base_url: str
    api_key: str

    def sdk(self, **kwargs):
        import openai

        return openai.OpenAI(**self._sdk_options(kwargs))

    def async_sdk(self, **kwargs):
        import openai

        return openai.AsyncOpenAI(**self._sdk_options(kwargs))

    def anthropic_sdk(self, **kwargs):
        """Anthropic's client (it adds /v1/messages to the base URL itself)."""
        import anthropic

        options = {"base_url": self.base_url, "api_key": self.api_key, "max_retries": 0}
        return anthropic.Anthropic(**(options | kwargs))

    def _sdk_options(self, kwargs: dict) -> dict:
        # No retries: a test must see the first answer, not a retried one.
        return {
            "base_url": f"{self.base_url}/v1",
            "api_key": self.api_key,
            "max_retries": 0,
        } | kwargs
