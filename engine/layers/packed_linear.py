"""bfloat16 projection weights packed once for oneDNN, the CPU GEMM library torch ships.

``F.linear`` on bfloat16 CPU tensors calls oneDNN with the weight in PyTorch's row-major
layout, and oneDNN reorders it into its blocked AMX / AVX512-BF16 layout on every call: a
decode step then reads each weight, writes a reordered copy and reads that again. Packing
at load time (``torch.ops.mkldnn._reorder_linear_weight``, what torch.compile's CPU freezing
pass does) leaves one read per step. The results are bit-identical to ``F.linear``'s (the same
kernel runs; only the weight's layout differs).

Only where oneDNN has bfloat16 kernels for the CPU (AVX512-BF16 or AMX; elsewhere bfloat16
GEMMs take another path, and float32 ones go to MKL); the weight is then an opaque oneDNN
tensor, so packing is the last thing done to a loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The batch size oneDNN is told to expect: decode batches of a few to a few dozen rows are
# what streams every weight each step (prefill chunks are compute-bound either way).
PACK_FOR_ROWS = 32


@dataclass(slots=True)
class PackedWeight:
    packed: torch.Tensor  # oneDNN (mkldnn layout) tensor of the [out, in] bfloat16 weight
    shape: torch.Size  # [out, in]


def can_pack(dtype: torch.dtype, device: torch.device) -> bool:
    """True when bfloat16 weights on ``device`` gain from oneDNN packing."""
    if device.type != "cpu" or dtype != torch.bfloat16 or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without these ops
        return False


def pack(weight: torch.Tensor) -> PackedWeight:
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_FOR_ROWS)
    return PackedWeight(packed, weight.shape)


def packed_linear(x: torch.Tensor, weight: PackedWeight, bias: torch.Tensor | None) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    y = torch.ops.mkldnn._linear_pointwise(rows, weight.packed, bias, "none", [], "")
    return y.view(*x.shape[:-1], weight.shape[0])
