"""Inspect a Hugging Face checkpoint without loading it: architecture, size, dtype, problems.

Reads config.json and the safetensors headers only (no torch), so the control plane can
validate a checkpoint before registering it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}
_DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}


def is_cross_encoder(config: dict) -> bool:
    """A sequence-classification head: it scores (query, document) pairs."""
    return any(a.endswith("ForSequenceClassification") for a in config.get("architectures") or [])


def cross_encoder_num_labels(config: dict) -> int:
    """The head's outputs, as transformers reads them (``id2label`` wins over ``num_labels``)."""
    return len(config.get("id2label") or {}) or int(config.get("num_labels") or 2)


class CheckpointError(ValueError):
    """The checkpoint cannot be served; the message says why."""


@dataclass
class CheckpointInfo:
    path: Path
    architecture: str
    model_type: str
    num_parameters: int
    dtype: str
    max_model_len: int
    num_bytes: int
    safetensors_files: list[str] = field(default_factory=list)


def read_safetensors_header(file: Path) -> dict:
    with file.open("rb") as fh:
        raw_len = fh.read(8)
        if len(raw_len) != 8:
            raise CheckpointError(f"{file.name} is not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > 100 * 1024 * 1024:
            raise CheckpointError(f"{file.name} is not a safetensors file (header too large)")
        try:
            return json.loads(fh.read(header_len))
        except ValueError as exc:
            raise CheckpointError(f"{file.name} has an unreadable safetensors header") from exc


# Integer tensors (BERT's position_ids buffer, say) are indexes, not parameters.
_INDEX_DTYPES = frozenset({"I64", "I32", "I16", "BOOL"})


@dataclass(frozen=True)
class SafetensorsTotals:
    num_parameters: int
    num_bytes: int
    dtype: str  # the dtype most parameters have, as torch names it ("float32", ...)
    files: list[str]


def safetensors_totals(path: Path) -> SafetensorsTotals:
    """Parameter count, size and main dtype of a directory's safetensors files, from their
    headers alone; raises CheckpointError when there are none."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{path} has no .safetensors weights (pickled .bin files are not loaded)"
        )
    num_params = num_bytes = 0
    dtypes: dict[str, int] = {}
    for file in files:
        for name, meta in read_safetensors_header(file).items():
            if name == "__metadata__" or meta["dtype"] in _INDEX_DTYPES:
                continue
            count = 1
            for dim in meta["shape"]:
                count *= dim
            num_params += count
            num_bytes += count * _DTYPE_BYTES.get(meta["dtype"], 4)
            dtypes[meta["dtype"]] = dtypes.get(meta["dtype"], 0) + count
    main_dtype = max(dtypes, key=dtypes.get) if dtypes else "F32"
    return SafetensorsTotals(
        num_parameters=num_params,
        num_bytes=num_bytes,
        dtype=_DTYPE_NAMES.get(main_dtype, main_dtype.lower()),
        files=[f.name for f in files],
    )


def inspect_checkpoint(path: str | Path) -> CheckpointInfo:
    """Validate the files and config of a checkpoint directory; raise CheckpointError if unusable."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{path} has no config.json")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as exc:
        raise CheckpointError(f"config.json is not valid JSON: {exc}") from exc
    archs = config.get("architectures") or []
    arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
    if arch is None:
        raise CheckpointError(
            f"architecture {archs or 'unspecified'} is not supported; the engine serves "
            + ", ".join(sorted(SUPPORTED_ARCHITECTURES))
        )
    totals = safetensors_totals(path)
    return CheckpointInfo(
        path=path,
        architecture=arch,
        model_type=SUPPORTED_ARCHITECTURES[arch],
        num_parameters=totals.num_parameters,
        dtype=totals.dtype,
        max_model_len=int(config.get("max_position_embeddings") or 2048),
        num_bytes=totals.num_bytes,
        safetensors_files=totals.files,
    )
