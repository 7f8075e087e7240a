"""StructuredOutputManager: the engine's one entry point for grammars.

The engine hands it each new request's samples; it starts compiling the request's spec at
once (engine/structured/compiler.py, cached by spec hash) and gives every sample its own
GrammarState. The compiler, and with it the llguidance tokenizer, is made on the first
constrained request, so an engine that never sees one pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.structured.compiler import GrammarCompiler
from engine.structured.state import GrammarState

if TYPE_CHECKING:
    from engine.model_config import ModelConfig
    from engine.request import Request

# How long an engine with nothing to schedule but requests waiting for their grammar blocks
# before it looks again (a compile usually takes well under this).
IDLE_WAIT_S = 0.005


class StructuredOutputManager:
    def __init__(self, model_path: str, model_config: ModelConfig) -> None:
        self._model_path = model_path
        self._model_config = model_config
        self.compiler: GrammarCompiler | None = None

    def attach(self, samples: list[Request]) -> None:
        """Give each sample of one request its grammar state, if the request has a spec."""
        structured = samples[0].sampling_params.structured
        if structured is None:
            return
        if self.compiler is None:
            config = self._model_config
            self.compiler = GrammarCompiler(
                self._model_path, config.vocab_size, list(config.eos_token_ids)
            )
        future = self.compiler.submit(structured)
        for sample in samples:
            sample.grammar = GrammarState(future)

    def wait_for_pending(self) -> None:
        """Called when a step scheduled nothing: wait briefly for a compile, not spin."""
        if self.compiler is not None:
            self.compiler.wait_for_pending(IDLE_WAIT_S)
