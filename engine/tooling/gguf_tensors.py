"""GGUF tensor names and layouts, mapped back to the Hugging Face checkpoint they came from.

llama.cpp's converter renames every tensor of a Hugging Face checkpoint
(``model.layers.3.mlp.up_proj.weight`` becomes ``blk.3.ffn_up.weight``) and, for the ``llama``
architecture only, reorders the rows of the q and k projections for its rotary embedding. This
module undoes both for the dense decoders the engine serves. It needs numpy only:
engine.tooling.gguf_convert reads and dequantizes the tensors, this says what each one is called and
how it is laid out.
"""

from __future__ import annotations

import numpy as np

# Tensors a GGUF file holds that are not weights of the model: llama.cpp's rotary frequency
# factors (llama 3 rope scaling). A Hugging Face checkpoint keeps those in its config instead.
NOT_WEIGHTS = frozenset({"rope_freqs.weight"})

_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",  # absent when the embeddings are tied
}
_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_QKV_BIAS = {
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
}
_QK_NORM = {
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
# Per architecture, so that a tensor its Hugging Face model has no place for is refused rather
# than written into a checkpoint the engine would then load without it.
_BLOCK_NAMES = {"llama": _BLOCK, "qwen2": _BLOCK | _QKV_BIAS, "qwen3": _BLOCK | _QK_NORM}

# The GGUF architectures (general.architecture) whose tensors this module maps. Mistral files
# say "llama": llama.cpp converts Mistral with its llama code, and the layouts are the same.
ARCHITECTURES = tuple(_BLOCK_NAMES)


def hf_name(arch: str, gguf_name: str) -> str | None:
    """The Hugging Face name of the tensor ``gguf_name`` of an ``arch`` file; None if that
    architecture's model has no such tensor."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    prefix, _, rest = gguf_name.partition(".")
    layer, _, leaf = rest.partition(".")
    if prefix != "blk" or not layer.isdigit() or leaf not in _BLOCK_NAMES[arch]:
        return None
    return f"model.layers.{layer}.{_BLOCK_NAMES[arch][leaf]}"


def rotary_heads(arch: str, gguf_name: str, head_count: int, head_count_kv: int) -> int | None:
    """The number of heads whose rows llama.cpp permuted in this tensor, or None if it left
    the tensor as it was: only the q and k of ``llama`` files are permuted."""
    if arch != "llama":
        return None
    leaf = gguf_name.split(".")[2] if gguf_name.startswith("blk.") else ""
    return {"attn_q": head_count, "attn_k": head_count_kv}.get(leaf)


def unpermute_rotary(tensor: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's row permutation of a llama q or k projection.

    Hugging Face's rotary embedding rotates the two halves of each head's rows
    (rotate_half); llama.cpp's rotates adjacent pairs, so its converter interleaves the halves:
    ``reshape(n_head, 2, rows // n_head // 2, ...).swapaxes(1, 2)``. This is the inverse.
    """
    rows = tensor.shape[0]
    heads = tensor.reshape(n_head, rows // n_head // 2, 2, *tensor.shape[1:])
    return heads.swapaxes(1, 2).reshape(tensor.shape)
