"""The attention backend interface and the per-step metadata every backend receives.

KV cache layout (one pair per layer): K and V are each a tensor
``[num_blocks, block_size, num_kv_heads, head_dim]``. Token ``offset`` of block ``b`` lives at
slot ``b * block_size + offset``, so ``cache.view(-1, num_kv_heads, head_dim)[slot]`` is one
token's K (or V). A sequence's block table lists its block ids in position order.

Batch layout: the flattened batch holds the decode sequences first (one query token each),
then the prefill chunks (several query tokens, possibly continuing a cached prefix).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class AttentionMetadata:
    # [num_tokens] cache slot of every token in the batch (where its K and V are written)
    slot_mapping: torch.Tensor
    # [num_seqs] tokens of context per sequence after this step (cached + new)
    seq_lens: torch.Tensor
    # [num_seqs, max_blocks] block ids per sequence, padded with 0
    block_tables: torch.Tensor
    # Python copies of the shapes, so backends never sync on a device tensor to read them
    seq_lens_list: list[int]
    query_start_loc: list[int]  # num_seqs + 1 offsets into the flattened batch
    num_decodes: int  # the first num_decodes sequences have exactly one query token
    block_size: int
    # Filled by AttentionBackend.prepare: whatever the backend precomputes once per step.
    backend_state: dict = field(default_factory=dict)
    # Called by the model within each layer, and by a backend between long prompts, when set:
    # where another step may run while this one waits (engine/core/step_preemption.py).
    checkpoint: Callable[[], None] | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_list)


class AttentionBackend(ABC):
    name: str

    def prepare(self, metadata: AttentionMetadata) -> None:  # noqa: B027 - optional hook
        """Precompute per-step data shared by all layers (gather indices, masks, ...)."""

    @abstractmethod
    def write_kv(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> None:
        """Store this step's K and V at ``metadata.slot_mapping``."""

    @abstractmethod
    def attend(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim] (this step's, already cached)
        value: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        metadata: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Causal attention of every query token over its sequence; [num_tokens, num_heads, head_dim]."""
