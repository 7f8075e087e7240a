"""Turn a GGUF file into a safetensors checkpoint the engine serves: weights dequantized,
config, tokenizer and chat template beside them.

``python -m engine.gguf_convert FILE.gguf OUT_DIR [--dtype auto|float32|float16|bfloat16]``
prints one line per stage; the control plane runs it in a subprocess (it needs torch and
transformers) and shows those lines as its progress. The checkpoint is written to a hidden
folder beside OUT_DIR and renamed into place at the end, so OUT_DIR exists only once complete.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

Progress = Callable[[str], None]

# GGUF tensor types that hold plain floats; every other type is a quantization format.
_FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


class GGUFConversionError(ValueError):
    """The file cannot be converted; the message says why."""


def _print(message: str) -> None:
    print(message, flush=True)


def _reader(gguf_file: Path):
    from gguf import GGUFReader

    try:
        return GGUFReader(gguf_file)
    except Exception as exc:
        raise GGUFConversionError(f"{gguf_file.name} is not a readable GGUF file: {exc}") from exc


def gguf_summary(reader) -> str:
    """Architecture, tensor types and context length, from the file's metadata."""
    field = reader.fields.get("general.architecture")
    if field is None:
        raise GGUFConversionError("the file names no architecture (general.architecture)")
    arch = str(field.contents())
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
    if dtype == "auto":
        dtype = checkpoint_dtype(reader)
    import torch  # after the cheap checks: importing these takes seconds
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    progress("converting the tokenizer and chat template")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except Exception as exc:
        raise GGUFConversionError(f"the tokenizer cannot be converted: {exc}") from exc
    progress(f"loading the weights and dequantizing them to {dtype}")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=getattr(torch, dtype)
        )
    except Exception as exc:
        raise GGUFConversionError(f"the weights cannot be converted: {exc}") from exc
    # The weights are plain tensors now: save them as an unquantized checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    num_parameters = sum(p.numel() for p in model.parameters())
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    partial.chmod(0o755)  # mkdtemp's folder is private; a checkpoint is read by other processes
    progress(f"writing {num_parameters / 1e6:.1f}M parameters as safetensors")
    try:
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        partial.rename(out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    progress(f"converted in {time.monotonic() - started:.0f}s: {out_dir}")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.gguf_convert",
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
