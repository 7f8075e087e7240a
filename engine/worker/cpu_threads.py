"""Small CPU steps run on one thread.

A step's parallel regions hand work to torch's other OpenMP threads. After the engine waited
for requests, those threads sleep, and waking one costs more than the step: on a 2-core VM
(2026-11-25, AMD EPYC) a 16-token prompt on the tiny llama took 1.8 ms at the median but 10 ms
at p90 and up to 38 ms after 50 ms idle with two threads, against 1.7 ms and at most 2.3 ms on
one. Work that small gains nothing from a second core anyway: a step whose weight work
(scheduled tokens x parameters) is under ``SMALL_STEP_MACS`` runs on the calling thread alone.
A decode of a 135M-parameter model is over it, so one stream keeps both cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.model_config import ModelConfig

# Multiply-accumulates under which a step runs on one thread: about a millisecond of one core.
SMALL_STEP_MACS = 20_000_000


class StepThreads:
    """Chooses the thread count of each CPU step from its size."""

    def __init__(self, macs_per_token: int, threads: int | None = None) -> None:
        self.macs_per_token = max(1, macs_per_token)
        self.threads = threads or torch.get_num_threads()

    @classmethod
    def for_model(cls, config: ModelConfig, device: torch.device) -> StepThreads:
        """From the model's shapes (a quantized model computes as many products per token as
        its float weights); on a GPU, a rule that never applies."""
        if device.type != "cpu":
            return cls(1, threads=1)
        hidden, head_dim = config.hidden_size, config.head_dim
        attention = (
            hidden * head_dim * (2 * config.num_attention_heads + 2 * config.num_key_value_heads)
        )
        mlp = 3 * hidden * config.intermediate_size
        lm_head = config.vocab_size * hidden
        return cls(config.num_hidden_layers * (attention + mlp) + lm_head)

    def is_small(self, num_tokens: int) -> bool:
        return self.threads > 1 and num_tokens * self.macs_per_token < SMALL_STEP_MACS

    @contextmanager
    def for_step(self, num_tokens: int) -> Iterator[None]:
        if not self.is_small(num_tokens):
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(self.threads)
