"""Read a PEFT LoRA adapter directory and check it against a base model, without torch.

Only ``adapter_config.json`` and the safetensors header are read, so the control plane's
Celery worker can validate an upload cheaply; ``loader`` reads the tensors later. Every
problem is a ``AdapterError`` (a ValueError) whose message an operator can act on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from engine.lora.shapes import SUPPORTED_MODULES, BaseModelShape

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE)

# base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight, as PEFT's save_pretrained
# writes it (the adapter name is stripped on save).
_KEY = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$"
)
_FLOAT_DTYPES = {"F32", "F16", "BF16"}
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class AdapterError(ValueError):
    """The adapter cannot be served with this base model; the message says why."""


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """A validated adapter: its hyper-parameters and where each weight is in the file."""

    path: Path
    rank: int
    lora_alpha: float
    use_rslora: bool
    target_modules: tuple[str, ...]  # in SUPPORTED_MODULES order
    checksum: str
    dtype: str  # safetensors dtype of the weights: F32, F16 or BF16
    # (layer, module) -> (key of A [rank, in], key of B [out, rank]); layers an adapter
    # leaves out (PEFT's layers_to_transform) are simply absent.
    weight_keys: dict[tuple[int, str], tuple[str, str]] = field(default_factory=dict)

    @property
    def scaling(self) -> float:
        """PEFT's factor on B·A: alpha / r, or alpha / sqrt(r) with rsLoRA."""
        return scaling_for(self.lora_alpha, self.rank, self.use_rslora)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(sorted({layer for layer, _ in self.weight_keys}))


def scaling_for(lora_alpha: float, rank: int, use_rslora: bool) -> float:
    return lora_alpha / math.sqrt(rank) if use_rslora else lora_alpha / rank


def adapter_checksum(path: str | Path) -> str:
    """sha256 over the adapter's two files (name, size and bytes of each, in a fixed order).

    Any change to the config or the weights gives a new checksum, which is what makes a
    re-upload under the same name a different adapter for caches.
    """
    path = Path(path)
    digest = hashlib.sha256()
    for name in ADAPTER_FILES:
        file = path / name
        if not file.is_file():
            raise AdapterError(f"{path} has no {name}")
        digest.update(f"{name}\0{file.stat().st_size}\0".encode())
        with file.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def read_adapter_config(path: str | Path) -> dict:
    path = Path(path).expanduser()
    if not path.is_dir():
        raise AdapterError(f"adapter path {path} is not a directory")
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise AdapterError(f"{path} has no {CONFIG_FILE}")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as exc:
        raise AdapterError(f"{CONFIG_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise AdapterError(f"{CONFIG_FILE} must hold a JSON object")
    return config


def _read_header(file: Path) -> dict:
    with file.open("rb") as fh:
        raw_len = fh.read(8)
        if len(raw_len) != 8:
            raise AdapterError(f"{file.name} is not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > _MAX_HEADER_BYTES:
            raise AdapterError(f"{file.name} is not a safetensors file (header too large)")
        try:
            header = json.loads(fh.read(header_len))
        except ValueError as exc:
            raise AdapterError(f"{file.name} has an unreadable safetensors header") from exc
    header.pop("__metadata__", None)
    return header


def _check_config(config: dict, max_lora_rank: int) -> tuple[int, float, bool]:
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise AdapterError(f"peft_type is {peft_type}; only LORA adapters are served")
    unsupported = {
        "use_dora": "DoRA adapters (use_dora) are not supported",
        "modules_to_save": "modules_to_save (fully trained extra modules) is not supported",
        "rank_pattern": "per-module ranks (rank_pattern) are not supported",
        "alpha_pattern": "per-module alphas (alpha_pattern) are not supported",
    }
    for key, message in unsupported.items():
        if config.get(key):
            raise AdapterError(message)
    if config.get("bias", "none") != "none":
        raise AdapterError(f"bias={config['bias']!r} is not supported; train with bias='none'")
    rank = config.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise AdapterError(f"r must be a positive integer, got {rank!r}")
    if rank > max_lora_rank:
        raise AdapterError(
            f"adapter rank {rank} exceeds the engine's max_lora_rank {max_lora_rank}"
        )
    alpha = config.get("lora_alpha", rank)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise AdapterError(f"lora_alpha must be a number, got {alpha!r}")
    targets = config.get("target_modules")
    if isinstance(targets, list):
        unknown = sorted(set(targets) - set(SUPPORTED_MODULES))
        if unknown:
            raise AdapterError(
                f"target modules {', '.join(unknown)} are not supported; LoRA applies to "
                + ", ".join(SUPPORTED_MODULES)
            )
    return rank, float(alpha), bool(config.get("use_rslora", False))


def _index_weights(header: dict, shape: BaseModelShape) -> dict[tuple[int, str], dict[str, str]]:
    found: dict[tuple[int, str], dict[str, str]] = {}
    for key in sorted(header):
        match = _KEY.match(key)
        if match is None:
            raise AdapterError(
                f"unexpected tensor {key!r} in {WEIGHTS_FILE}; expected PEFT LoRA keys such as "
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
            )
        layer, _parent, module, which = int(match[1]), match[2], match[3], match[4]
        if module not in SUPPORTED_MODULES:
            raise AdapterError(
                f"tensor {key!r} targets {module}; LoRA applies to " + ", ".join(SUPPORTED_MODULES)
            )
        if layer >= shape.num_hidden_layers:
            raise AdapterError(
                f"tensor {key!r} is for layer {layer} but the base model has "
                f"{shape.num_hidden_layers} layers"
            )
        found.setdefault((layer, module), {})[which] = key
    return found


def inspect_adapter(
    path: str | Path, base: BaseModelShape, *, max_lora_rank: int = 64
) -> AdapterSpec:
    """Validate the adapter at ``path`` for ``base``; return its spec or raise AdapterError."""
    path = Path(path).expanduser().resolve()
    config = read_adapter_config(path)
    rank, alpha, use_rslora = _check_config(config, max_lora_rank)
    weights_file = path / WEIGHTS_FILE
    if not weights_file.is_file():
        if (path / "adapter_model.bin").is_file():
            raise AdapterError(
                "adapter_model.bin (pickle) is not loaded; save the adapter with safetensors"
            )
        raise AdapterError(f"{path} has no {WEIGHTS_FILE}")
    header = _read_header(weights_file)
    if not header:
        raise AdapterError(f"{WEIGHTS_FILE} holds no tensors")
    weight_keys: dict[tuple[int, str], tuple[str, str]] = {}
    dtypes = set()
    for (layer, module), keys in _index_weights(header, base).items():
        if set(keys) != {"A", "B"}:
            missing = "lora_B" if "A" in keys else "lora_A"
            raise AdapterError(f"layer {layer} {module} has no {missing} weight")
        in_features, out_features = base.in_out(module)
        a_meta, b_meta = header[keys["A"]], header[keys["B"]]
        for meta, expected, name in (
            (a_meta, [rank, in_features], "lora_A"),
            (b_meta, [out_features, rank], "lora_B"),
        ):
            if list(meta["shape"]) != expected:
                raise AdapterError(
                    f"layer {layer} {module}.{name} has shape {list(meta['shape'])}, expected "
                    f"{expected} (rank {rank}, base {module} is {in_features} -> {out_features})"
                )
            if meta["dtype"] not in _FLOAT_DTYPES:
                raise AdapterError(f"layer {layer} {module}.{name} has dtype {meta['dtype']}")
            dtypes.add(meta["dtype"])
        weight_keys[(layer, module)] = (keys["A"], keys["B"])
    modules = {module for _, module in weight_keys}
    return AdapterSpec(
        path=path,
        rank=rank,
        lora_alpha=alpha,
        use_rslora=use_rslora,
        target_modules=tuple(m for m in SUPPORTED_MODULES if m in modules),
        checksum=adapter_checksum(path),
        dtype=sorted(dtypes)[0] if len(dtypes) == 1 else "F32",
        weight_keys=weight_keys,
    )
