"""One decoder implementation for the Llama family, with per-architecture switches.

Llama 2/3 and Mistral share the plain block; Qwen2 adds q/k/v biases; Qwen3 adds an RMSNorm
over each head of q and k before rotary. Projections that read the same input are fused at
load time (q|k|v, gate|up) so a layer runs two big matmuls instead of five.

LoRA hooks in after each projection: ``forward(..., lora=apply)`` calls
``apply(y, x, layer_index, module)`` with the projection's output ``y`` and input ``x``, which
adds every token's adapter delta to ``y`` in place. Module names follow the fused layout
(``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``; see engine.lora.slots.PACKED_MODULES).

On a CPU, decode-only steps without LoRA run the whole layer loop in one native call
(engine.models.fused_decode; ``PLATFORM_FUSED_DECODE=0`` or ``fused_decode = None`` turns it
off); this loop is its reference, and serves every other step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention.backend import AttentionBackend, AttentionMetadata
from engine.layers.activation import silu_and_mul
from engine.layers.layernorm import add_rms_norm, rms_norm
from engine.layers.packed_linear import PackedWeight
from engine.layers.quantized_linear import QuantizedWeight, linear
from engine.layers.rotary import RotaryEmbedding
from engine.model_config import ModelConfig
from engine.models.file_rows import FileRows
from engine.models.fused_decode import FusedDecode

# apply(y, x, layer_index, module) -> y, adding LoRA deltas to y in place.
LoraApply = Callable[[torch.Tensor, torch.Tensor, int, str], torch.Tensor]


# A projection's weight: a float matrix, or its weight-only quantized form (engine.models.quantize).
Weight = torch.Tensor | QuantizedWeight | PackedWeight
EMBEDDING = "model.embed_tokens.weight"


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor
    qkv: Weight  # [(heads + 2 * kv_heads) * head_dim, hidden]
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o_proj: Weight
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: Weight  # [2 * intermediate, hidden]
    gate_up_bias: torch.Tensor | None
    down: Weight
    down_bias: torch.Tensor | None


class DecoderLM:
    """Forward pass over a flattened batch of tokens with paged KV caches."""

    def __init__(
        self,
        config: ModelConfig,
        weights: dict[str, torch.Tensor],
        *,
        dtype: torch.dtype,
        device: torch.device,
        backend: AttentionBackend,
        transform: Callable[[str, torch.Tensor], Weight] | None = None,
    ) -> None:
        """``weights`` may read lazily (each name once); ``transform`` turns each projection
        ("projection") and the LM head ("lm_head") into the form kept (quantized or packed)
        as it is built (engine.models.quantize.load_transform)."""
        self.config = config
        self._transform = transform or (lambda kind, weight: weight)
        self.backend = backend
        self.dtype = dtype
        self.device = device
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        self.eps = config.rms_norm_eps
        take = _WeightTaker(weights, dtype, device)
        # On a CPU with converted weights, the table may stay in its file (file_rows.py).
        rows = take.file_rows(EMBEDDING)
        self.embed_tokens: torch.Tensor | FileRows = rows if rows is not None else take(EMBEDDING)
        # The LM head before the layers: a tied one made from a read of the whole table holds
        # it only until then, before the layers' weights come in.
        self.lm_head: Weight
        if config.tie_word_embeddings and "lm_head.weight" not in weights:
            table = take(EMBEDDING) if rows is not None else self.embed_tokens
            self.lm_head = self._transform("lm_head", table)
            del table
        else:
            self.lm_head = self._transform("lm_head", take("lm_head.weight"))
        self.layers = [self._layer(take, i) for i in range(config.num_hidden_layers)]
        self.norm = take("model.norm.weight")
        take.check_all_used()
        del self._transform  # loading is over; the model keeps no reference to it
        self.rotary = RotaryEmbedding(
            self.head_dim,
            config.rope_theta,
            config.rope_scaling,
            config.max_model_len,
            dtype=torch.float32 if dtype == torch.float32 else dtype,
            device=device,
        )
        # Built last: it lays out the loaded weights and reads the rotary tables.
        self.fused_decode = FusedDecode.build(self)

    def _layer(self, take: _WeightTaker, i: int) -> LayerWeights:
        p = f"model.layers.{i}."
        attn, mlp, cfg = p + "self_attn.", p + "mlp.", self.config

        def projection(weight: torch.Tensor) -> Weight:
            return self._transform("projection", weight)

        return LayerWeights(
            input_norm=take(p + "input_layernorm.weight"),
            qkv=projection(
                take.cat(attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight")
            ),
            qkv_bias=take.cat(attn + "q_proj.bias", attn + "k_proj.bias", attn + "v_proj.bias")
            if cfg.qkv_bias
            else None,
            q_norm=take(attn + "q_norm.weight") if cfg.qk_norm else None,
            k_norm=take(attn + "k_norm.weight") if cfg.qk_norm else None,
            o_proj=projection(take(attn + "o_proj.weight")),
            o_bias=take(attn + "o_proj.bias") if cfg.o_bias else None,
            post_norm=take(p + "post_attention_layernorm.weight"),
            gate_up=projection(take.cat(mlp + "gate_proj.weight", mlp + "up_proj.weight")),
            gate_up_bias=take.cat(mlp + "gate_proj.bias", mlp + "up_proj.bias")
            if cfg.mlp_bias
            else None,
            down=projection(take(mlp + "down_proj.weight")),
            down_bias=take(mlp + "down_proj.bias") if cfg.mlp_bias else None,
        )

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The embedding rows of ``input_ids``, ``[num_tokens, hidden]``."""
        table = self.embed_tokens
        if isinstance(table, FileRows):
            return table.lookup(input_ids)
        return F.embedding(input_ids, table)

    def forward(
        self,
        input_ids: torch.Tensor,  # [num_tokens]
        positions: torch.Tensor,  # [num_tokens]
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        metadata: AttentionMetadata,
        lora: LoraApply | None = None,
    ) -> torch.Tensor:
        """Hidden states after the final norm, [num_tokens, hidden].

        ``lora``, when given, adds the batch's adapter deltas after every projection.
        """
        hidden = self.embed(input_ids)
        fused = self.fused_decode
        if lora is None and fused is not None and fused.can_run(hidden, metadata):
            x, residual = fused(hidden, positions, kv_caches, metadata)
            x, _ = add_rms_norm(x, residual, self.norm, self.eps)
            return x
        num_tokens = hidden.shape[0]
        q_size = self.num_heads * self.head_dim
        kv_size = self.num_kv_heads * self.head_dim
        residual = hidden
        x = None
        # Where another step may run (step_preemption.py): before each layer, before and after
        # its attention and in its MLP, so that a step slowed down by a busy machine (a flood's
        # requests arriving took it from 8 to 170 ms) still pauses every few milliseconds.
        pause = metadata.checkpoint or _no_pause
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, kv_caches, strict=True)):
            pause()
            if x is None:
                x = rms_norm(hidden, layer.input_norm, self.eps)
            else:
                x, residual = add_rms_norm(x, residual, layer.input_norm, self.eps)
            qkv = linear(x, layer.qkv, layer.qkv_bias)
            if lora is not None:
                lora(qkv, x, i, "qkv_proj")
            pause()
            q, k, v = qkv.split((q_size, kv_size, kv_size), dim=-1)
            q = q.view(num_tokens, self.num_heads, self.head_dim)
            k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
            v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
            if layer.q_norm is not None:
                q = rms_norm(q, layer.q_norm, self.eps)
                k = rms_norm(k, layer.k_norm, self.eps)
            q, k = self.rotary(positions, q, k)
            self.backend.write_kv(k, v, k_cache, v_cache, metadata)
            attn = self.backend.attend(q, k, v, k_cache, v_cache, metadata, self.scale)
            pause()
            attn = attn.reshape(num_tokens, q_size)
            x = linear(attn, layer.o_proj, layer.o_bias)
            if lora is not None:
                lora(x, attn, i, "o_proj")
            x, residual = add_rms_norm(x, residual, layer.post_norm, self.eps)
            gate_up = linear(x, layer.gate_up, layer.gate_up_bias)
            if lora is not None:
                lora(gate_up, x, i, "gate_up_proj")
            act = silu_and_mul(gate_up)
            pause()
            x = linear(act, layer.down, layer.down_bias)
            if lora is not None:
                lora(x, act, i, "down_proj")
        x, _ = add_rms_norm(x, residual, self.norm, self.eps)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> fp32 logits [n, vocab]."""
        return linear(hidden, self.lm_head).float()


def _no_pause() -> None:
    """No step may run inside this one."""


class _WeightTaker:
    """Hands out checkpoint tensors in the engine's dtype and device; reports leftovers."""

    def __init__(self, weights: dict[str, torch.Tensor], dtype: torch.dtype, device) -> None:
        self.weights = weights
        self.dtype = dtype
        self.device = device
        self.used: set[str] = set()

    def __call__(self, name: str, *, copied: bool = False) -> torch.Tensor:
        """``name`` in the engine's dtype and device. A tensor the model only copies from
        (``copied``: concatenated; or converted to another dtype or device) is read into
        memory of its own where the weights can (loader.CheckpointWeights.read): pages of a
        map would stay resident for nothing."""
        if name not in self.weights:
            raise ValueError(f"checkpoint is missing weight {name!r}")
        self.used.add(name)
        # Weights read into memory of their own already (not mapped) have no ``read`` to use.
        mapped = getattr(self.weights, "mapped", False)
        read = getattr(self.weights, "read", None) if mapped else None
        if read is not None and copied:
            tensor = read(name)
        else:
            tensor = self.weights[name]  # mapped: a view, no page read yet
            if read is not None and (self.device.type != "cpu" or tensor.dtype != self.dtype):
                tensor = read(name)
        return tensor.to(device=self.device, dtype=self.dtype).contiguous()

    def cat(self, *names: str) -> torch.Tensor:
        return torch.cat([self(n, copied=True) for n in names], dim=0).contiguous()

    def file_rows(self, name: str) -> FileRows | None:
        """``name`` left in its file, if the weights offer that for this dtype and device
        (loader.CheckpointWeights.file_rows); None otherwise."""
        offer = getattr(self.weights, "file_rows", None)
        rows = offer(name, self.dtype, self.device) if offer is not None else None
        if rows is not None:
            self.used.add(name)
        return rows

    def check_all_used(self) -> None:
        unused = [n for n in self.weights if n not in self.used and "rotary_emb" not in n]
        if unused:
            raise ValueError(
                f"checkpoint has {len(unused)} weights this model does not use, e.g. {unused[:3]}"
            )
