"""The inference engine: scheduler, paged KV cache, model runner, sampler, LoRA, service loop.

Usable on its own (``from engine import LLM, SamplingParams``). Never imports Django.
Heavy modules load lazily, so ``import engine.protocol`` stays torch-free for API processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LLM", "SamplingParams"]

if TYPE_CHECKING:  # pragma: no cover
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from engine.llm import LLM

        return LLM
    if name == "SamplingParams":
        from engine.sampling_params import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
