"""Turn a GGUF file into a safetensors checkpoint the engine serves: weights dequantized,
config, tokenizer and chat template beside them.

``python -m engine.tooling.gguf_convert FILE.gguf OUT_DIR [--dtype auto|float32|float16|bfloat16]``
prints one line per stage; the control plane runs it in a subprocess (it needs torch and
transformers) and shows those lines as its progress. The checkpoint is written to a hidden
folder beside OUT_DIR and renamed into place at the end, so OUT_DIR exists only once complete.

The weights are read and dequantized with the ``gguf`` package and renamed back to their
Hugging Face names here (engine.tooling.gguf_tensors), not through transformers' GGUF model loader:
that one needs ``accelerate``, which the engine does not otherwise use or install, and builds a
whole transformers model only for its state dict. transformers still converts the config and
the tokenizer (with its chat template), which needs no ``accelerate``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine.tooling.gguf_tensors import (
    ARCHITECTURES,
    NOT_WEIGHTS,
    hf_name,
    rotary_heads,
    unpermute_rotary,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

Progress = Callable[[str], None]

# GGUF tensor types that hold plain floats; every other type is a quantization format.
_FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

# The model class config.json names, by the model_type transformers gives the GGUF's config.
# "mistral" comes from a "llama" file whose general.name is "mistral".
_CAUSAL_LM = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


class GGUFConversionError(ValueError):
    """The file cannot be converted; the message says why."""


def _print(message: str) -> None:
    print(message, flush=True)


def _reader(gguf_file: Path):
    from engine.tooling.gguf_reading import ArrayGGUFReader

    try:
        return ArrayGGUFReader(gguf_file)
    except Exception as exc:
        raise GGUFConversionError(f"{gguf_file.name} is not a readable GGUF file: {exc}") from exc


def _architecture(reader) -> str:
    field = reader.fields.get("general.architecture")
    if field is None:
        raise GGUFConversionError("the file names no architecture (general.architecture)")
    return str(field.contents())


def _head_counts(reader, arch: str) -> tuple[int, int]:
    """Attention heads, and key/value heads (as many when the file does not say)."""
    heads = reader.fields.get(f"{arch}.attention.head_count")
    if heads is None:
        raise GGUFConversionError(f"the file does not say {arch}.attention.head_count")
    kv_heads = reader.fields.get(f"{arch}.attention.head_count_kv", heads)
    return int(heads.contents()), int(kv_heads.contents())


def gguf_content_key(gguf_file: Path) -> str:
    """The file's name and a digest of its bytes: what names a conversion kept for reuse."""
    digest = hashlib.sha256()
    with gguf_file.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return f"{gguf_file.stem}-{digest.hexdigest()[:16]}"


def gguf_summary(reader) -> str:
    """Architecture, tensor types and context length, from the file's metadata."""
    arch = _architecture(reader)
    types = Counter(t.tensor_type.name for t in reader.tensors)
    kinds = ", ".join(f"{count} {name}" for name, count in types.most_common())
    summary = f"{arch}, {len(reader.tensors)} tensors ({kinds})"
    context = reader.fields.get(f"{arch}.context_length")
    return f"{summary}, context {context.contents()}" if context is not None else summary


def checkpoint_dtype(reader) -> str:
    """The dtype most of the file's unquantized weights have; float32 when every large tensor
    is quantized (only the norms are left as floats then, and they are float32)."""
    elements: Counter[str] = Counter()
    for tensor in reader.tensors:
        name = _FLOAT_TYPES.get(tensor.tensor_type.name)
        if name is not None:
            elements[name] += int(tensor.n_elements)
    return elements.most_common(1)[0][0] if elements else "float32"


def _dequantize(tensor) -> np.ndarray:
    """The tensor as float32, shaped as Hugging Face shapes it."""
    from gguf.quants import dequantize

    try:
        array = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as exc:
        raise GGUFConversionError(f"tensor {tensor.name} cannot be dequantized: {exc}") from exc
    # GGUF lists dimensions fastest-varying first, numpy and torch slowest first.
    return array.reshape([int(dim) for dim in reversed(tensor.shape)])


def _to_torch(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    import torch

    # F32 tensors come back as read-only views of the memory-mapped file: copy those, as
    # torch.from_numpy wants memory it may write.
    if not array.flags.writeable:
        array = array.copy()
    # contiguous() copies nothing here; it is there because save_file refuses strided tensors.
    return torch.from_numpy(array).to(dtype).contiguous()


def read_weights(reader, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every weight of the file in ``dtype``, under its Hugging Face name and in its layout."""
    arch = _architecture(reader)
    head_count, head_count_kv = _head_counts(reader, arch)
    weights: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        if tensor.name in NOT_WEIGHTS:
            continue
        name = hf_name(arch, tensor.name)
        if name is None:
            raise GGUFConversionError(
                f"tensor {tensor.name} has no counterpart in a Hugging Face {arch} model"
            )
        array = _dequantize(tensor)
        n_head = rotary_heads(arch, tensor.name, head_count, head_count_kv)
        if n_head is not None:
            array = unpermute_rotary(array, n_head)
        weights[name] = _to_torch(array, dtype)
    return weights


def _config(reader, folder: str, name: str, dtype: torch.dtype):
    """The model's transformers config, as saving the loaded model would have written it."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
    except Exception as exc:
        raise GGUFConversionError(f"the config cannot be converted: {exc}") from exc
    architecture = _CAUSAL_LM.get(config.model_type)
    if architecture is None:
        raise GGUFConversionError(f"model type {config.model_type!r} is not supported")
    # The GGUF config names no model class, and the engine picks its model by this.
    config.architectures = [architecture]
    config.dtype = dtype
    # llama.cpp writes no output tensor when the head shares the embedding matrix.
    config.tie_word_embeddings = all(t.name != "output.weight" for t in reader.tensors)
    # transformers reads no head size from a qwen3 file, and Qwen3Config's default (128) is
    # wrong for any model whose heads are not 128 wide; key_length is the file's head size.
    head_dim = reader.fields.get(f"{_architecture(reader)}.attention.key_length")
    if head_dim is not None:
        config.head_dim = int(head_dim.contents())
    return config


def _tokenizer(folder: str, name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except Exception as exc:
        raise GGUFConversionError(f"the tokenizer cannot be converted: {exc}") from exc


def _write_checkpoint(folder: Path, weights: dict, config, tokenizer) -> None:
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    # The "format" entry is what transformers writes; some loaders insist on it.
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    config.save_pretrained(folder)
    GenerationConfig.from_model_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def convert_gguf(
    gguf_file: str | Path, out_dir: str | Path, *, dtype: str = "auto", progress: Progress = _print
) -> Path:
    """Write the safetensors checkpoint of ``gguf_file`` to ``out_dir`` (which must not exist)."""
    gguf_file, out_dir = Path(gguf_file).resolve(), Path(out_dir).resolve()
    if not gguf_file.is_file():
        raise GGUFConversionError(f"{gguf_file} is not a file")
    if out_dir.exists():
        raise GGUFConversionError(f"{out_dir} already exists; remove it to convert again")
    started = time.monotonic()
    reader = _reader(gguf_file)
    progress(f"reading {gguf_file.name}: {gguf_summary(reader)}")
    arch = _architecture(reader)
    if arch not in ARCHITECTURES:
        raise GGUFConversionError(
            f"architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}"
        )
    if dtype == "auto":
        dtype = checkpoint_dtype(reader)
    import torch  # after the cheap checks: importing these takes seconds

    torch_dtype = getattr(torch, dtype)
    folder, name = str(gguf_file.parent), gguf_file.name
    progress("converting the tokenizer and chat template")
    from engine.tooling.gguf_reading import metadata_read_once

    with metadata_read_once(reader, gguf_file):
        tokenizer = _tokenizer(folder, name)
        config = _config(reader, folder, name, torch_dtype)
    progress(f"loading the weights and dequantizing them to {dtype}")
    weights = read_weights(reader, torch_dtype)
    num_parameters = sum(weight.numel() for weight in weights.values())
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    partial.chmod(0o755)  # mkdtemp's folder is private; a checkpoint is read by other processes
    progress(f"writing {num_parameters / 1e6:.1f}M parameters as safetensors")
    try:
        _write_checkpoint(partial, weights, config, tokenizer)
        partial.rename(out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    progress(f"converted in {time.monotonic() - started:.0f}s: {out_dir}")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.tooling.gguf_convert",
        description="Convert a GGUF file to a safetensors checkpoint (dequantized weights, "
        "config, tokenizer, chat template).",
    )
    parser.add_argument("gguf_file")
    parser.add_argument("out_dir")
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"]
    )
    args = parser.parse_args(argv)
    # One line per stage is the progress; progress bars and notices would bury it. Set before
    # transformers and tqdm are imported, which read them then.
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
        os.environ.setdefault(name, "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        convert_gguf(args.gguf_file, args.out_dir, dtype=args.dtype)
    except GGUFConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
