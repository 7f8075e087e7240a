"""GGUF files written from the tiny random-weight checkpoints the way llama.cpp's converter
writes them (F32 weights), for the GGUF conversion and registration tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's converter does to llama q and k rows (LlamaModel.permute)."""
    rows = weights.shape[0]
    heads = weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
    return heads.swapaxes(1, 2).reshape(weights.shape)


def write_gguf(checkpoint: Path, path: Path, arch: str, extra: dict | None = None) -> Path:
    """``checkpoint`` as llama.cpp's converter writes it, with F32 weights: its tensor names
    (from the gguf package's own table, not the converter's), its metadata, and for llama its
    q and k rows permuted; then the ``extra`` tensors, as they are."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((checkpoint / "config.json").read_text())
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(f"tiny {arch}")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(config.get("head_dim") or config["hidden_size"] // heads)
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    add_tokenizer(writer, checkpoint, config)
    arch_id = next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)
    names = gguf.get_tensor_name_map(arch_id, config["num_hidden_layers"])
    for hf_name, weights in load_file(checkpoint / "model.safetensors").items():
        stem, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{names.get_name(stem)}.{suffix}"
        if arch == "llama" and ".attn_q." in gguf_name:
            weights = llama_cpp_permute(weights, heads)
        elif arch == "llama" and ".attn_k." in gguf_name:
            weights = llama_cpp_permute(weights, kv_heads)
        writer.add_tensor(gguf_name, np.ascontiguousarray(weights))
    for name, weights in (extra or {}).items():
        writer.add_tensor(name, weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def add_tokenizer(writer, checkpoint: Path, config: dict) -> None:
    """The checkpoint's byte-level BPE as GGUF's "gpt2" tokenizer."""
    import gguf

    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text())
    tokens = {index: token for token, index in tokenizer["model"]["vocab"].items()}
    special = {added["id"] for added in tokenizer["added_tokens"] if added["special"]}
    tokens |= {added["id"]: added["content"] for added in tokenizer["added_tokens"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([tokens[index] for index in range(len(tokens))])
    writer.add_token_types(
        [
            gguf.TokenType.CONTROL if index in special else gguf.TokenType.NORMAL
            for index in range(len(tokens))
        ]
    )
    writer.add_token_merges([" ".join(pair) for pair in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_chat_template((checkpoint / "chat_template.jinja").read_text())
