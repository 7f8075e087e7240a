"""Load a checkpoint's safetensors into a DecoderLM without building a transformers model."""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from engine.attention.backend import AttentionBackend
from engine.model_config import ModelConfig
from engine.models.decoder import DecoderLM
from engine.models.file_rows import FileRows
from engine.models.quantize import check_quantization, load_transform, log_weights

logger = logging.getLogger(__name__)


# safetensors' dtype names (the header's "dtype") as torch dtypes.
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


class CheckpointWeights(Mapping[str, torch.Tensor]):
    """A checkpoint's tensors by name, each read from its safetensors file when asked for.

    Mapped (the default): safetensors' zero-copy tensors on the file's pages, shared by every
    engine on the host through the page cache; right when the model keeps the float weights.
    Read (``mapped=False``): each tensor copied into memory of its own with plain reads, for a
    model that converts its weights as it loads (quantization, packing): the file's pages then
    never count against the engine, which holds one layer's floats at a time, not the file.
    """

    def __init__(self, path: Path, *, mapped: bool = True):
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ValueError(f"{path} has no .safetensors weights")
        self.mapped = mapped
        self._where: dict[str, tuple] = {}  # name -> (file, dtype, shape, start, end)
        self._handles: dict[str, object] = {}  # name -> safetensors handle (mapped)
        for file in files:
            # Mapped, a dtype the header parser does not know is left to safetensors.
            self._where.update(_read_header(file, strict=not mapped))
            if mapped:
                handle = safe_open(str(file), framework="pt")
                self._handles.update((name, handle) for name in handle.keys())  # noqa: SIM118

    def __getitem__(self, name: str) -> torch.Tensor:
        if self.mapped:
            return self._handles[name].get_tensor(name)
        return self.read(name)

    def read(self, name: str) -> torch.Tensor:
        """``name`` copied into memory of its own with plain reads, mapped or not: for a
        tensor the model only copies from (q, k and v concatenated into one projection, gate
        and up into another), whose pages of a map would stay resident for nothing (SmolLM2
        float32: 270 of the file's 513 MiB)."""
        if name not in self._where:
            if name in self._handles:
                return self[name]  # a dtype only safetensors knows: read through its map
            raise KeyError(name)
        file, dtype, shape, start, end = self._where[name]
        tensor = torch.empty(shape, dtype=dtype)
        with open(file, "rb") as fh:
            fh.seek(start)
            if fh.readinto(tensor.view(-1).view(torch.uint8).numpy()) != end - start:
                raise ValueError(f"{file} ends inside tensor {name!r}")
        return tensor

    def file_rows(self, name: str, dtype: torch.dtype, device: torch.device) -> FileRows | None:
        """``name`` (a 2-D table) left in its file and read a row per lookup (file_rows.py),
        when the weights are read, not mapped, and the file stores it as ``dtype`` for a
        CPU; None otherwise (mapped weights are on the file's pages already)."""
        if self.mapped or device.type != "cpu" or name not in self._where:
            return None
        file, stored, shape, start, _ = self._where[name]
        if stored != dtype or len(shape) != 2:
            return None
        return FileRows(file, start, (shape[0], shape[1]), dtype)

    def __contains__(self, name: object) -> bool:
        return name in (self._handles if self.mapped else self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles if self.mapped else self._where)

    def __len__(self) -> int:
        return len(self._handles if self.mapped else self._where)


def _read_header(file: Path, *, strict: bool = True) -> dict[str, tuple]:
    """name -> (file, dtype, shape, start, end) from a safetensors file's JSON header (an
    8-byte little-endian length, then the header; data offsets count from its end). A dtype
    torch has no name for here is an error, or with ``strict=False`` left out."""
    with open(file, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            if not strict:
                continue
            raise ValueError(f"{file}: tensor {name!r} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        tensors[name] = (file, _DTYPES[info["dtype"]], info["shape"], base + start, base + end)
    return tensors


def load_model(
    config: ModelConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    backend: AttentionBackend,
    quantization: str | None = None,
) -> DecoderLM:
    """The model in ``dtype`` on ``device``; ``quantization`` ("int8", "int4") stores the
    projection weights weight-only quantized (engine.models.quantize)."""
    check_quantization(quantization, device)
    transform = load_transform(quantization, dtype, device)
    model = DecoderLM(
        config,
        CheckpointWeights(config.path, mapped=transform is None),
        dtype=dtype,
        device=device,
        backend=backend,
        transform=transform,
    )
    log_weights(model, quantization)
    logger.info(
        "loaded %s (%s, %d layers) on %s as %s%s",
        config.path,
        config.architecture,
        config.num_hidden_layers,
        device,
        dtype,
        f", weights {quantization}" if quantization else "",
    )
    return model
