"""Run a transformers model with the engine's LoRA slots wired into its projections.

This is the integration the engine's own model code makes: after each target linear,
``LoraManager.apply`` adds the deltas of every token's adapter. Tests compare the result with
PEFT, the reference implementation of LoRA.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.adapters import AdapterIdentity
from engine.lora.manager import LoraManager
from engine.lora.shapes import MODULE_PARENTS


class LoraPatchedModel:
    """Wraps an HF causal LM; every batch row runs under its own adapter (or none)."""

    def __init__(self, model, manager: LoraManager):
        self.model = model
        self.manager = manager
        self.row_adapters: Sequence[AdapterIdentity | None] = []
        for layer_index, layer in enumerate(model.model.layers):
            for module, parent in MODULE_PARENTS.items():
                linear = getattr(getattr(layer, parent), module)
                linear.forward = self._patched(linear, layer_index, module)

    def _patched(self, linear, layer_index: int, module: str):
        original = linear.forward

        def forward(x: torch.Tensor) -> torch.Tensor:
            y = original(x)
            rows, tokens = x.shape[0], x.shape[1]
            batch = self.manager.prepare_batch(self.row_adapters, [tokens] * rows)
            flat_y = y.reshape(rows * tokens, -1).clone()
            self.manager.apply(flat_y, x.reshape(rows * tokens, -1), layer_index, module, batch)
            return flat_y.view_as(y)

        return forward

    @torch.no_grad()
    def logits(self, input_ids: torch.Tensor, adapters: Sequence[AdapterIdentity | None]):
        self.row_adapters = list(adapters)
        return self.model(input_ids=input_ids).logits

    @torch.no_grad()
    def greedy(self, input_ids: torch.Tensor, adapter: AdapterIdentity | None, max_new_tokens):
        self.row_adapters = [adapter]
        out = self.model.generate(
            input_ids, max_new_tokens=max_new_tokens, do_sample=False, min_new_tokens=max_new_tokens
        )
        return out[0, input_ids.shape[1] :].tolist()
