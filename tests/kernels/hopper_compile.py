"""Compile kernels for an H100/H200 (sm_90) on a machine without a GPU.

The interpreter checks what a kernel computes, not whether Triton's compiler accepts it: types,
dot shapes and constexpr handling differ. Triton's wheel carries ptxas, so each wrapper's real
launch can be captured (nothing runs) and its kernel compiled ahead of time to a cubin, and
ptxas reports the registers and spills per thread.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

_POINTER_TYPES = {
    torch.bfloat16: "*bf16",
    torch.float16: "*fp16",
    torch.float32: "*fp32",
    torch.int32: "*i32",
    torch.int64: "*i64",
}
_LAUNCH_OPTIONS = ("num_warps", "num_stages")


@dataclass
class Launch:
    kernel: object  # the JITFunction
    args: dict  # argument name -> value, as the wrapper passed them
    options: dict  # num_warps, num_stages


class _Recorder:
    """Stands in for ``kernel[grid]``: records the launch instead of running it."""

    def __init__(self, kernel, launches: list[Launch]) -> None:
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            options = {k: kwargs.pop(k) for k in _LAUNCH_OPTIONS if k in kwargs}
            names = self.kernel.arg_names
            bound = dict(zip(names, args, strict=False)) | kwargs
            self.launches.append(Launch(self.kernel, bound, options))

        return launch


@contextlib.contextmanager
def recorded_launches(module):
    """Inside, the module's wrappers record their kernel launches instead of running them."""
    launches: list[Launch] = []
    saved = {}
    for name, value in vars(module).items():
        if type(value).__name__ == "JITFunction" and name.endswith("_kernel"):
            saved[name] = value
    saved["check_launchable"] = getattr(module, "check_launchable", None)
    try:
        for name, value in saved.items():
            if name != "check_launchable":
                setattr(module, name, _Recorder(value, launches))
        if saved["check_launchable"] is not None:
            module.check_launchable = lambda tensor: None
        yield launches
    finally:
        for name, value in saved.items():
            if value is not None:
                setattr(module, name, value)


def _signature(launch: Launch) -> tuple[dict, dict]:
    signature, constexprs = {}, {}
    for param in launch.kernel.params:
        value = launch.args[param.name]
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = _POINTER_TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[param.name] = "i1"
        elif isinstance(value, int):
            signature[param.name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[param.name] = "fp32"
        else:
            raise TypeError(f"{param.name}: cannot type {value!r}")
    return signature, constexprs


@dataclass
class Report:
    name: str
    registers: int
    spill_bytes: int
    shared_bytes: int


def compile_for_sm90(launch: Launch) -> Report:
    """Compile one recorded launch to an sm_90 cubin; ptxas's resource report."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs = _signature(launch)
    source = ASTSource(fn=launch.kernel, signature=signature, constexprs=constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=launch.options)
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path  # the ptxas Triton itself uses for this architecture
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        result = subprocess.run(
            [ptxas, "-arch=sm_90a", "-v", str(ptx), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    info = result.stderr
    if result.returncode:
        raise RuntimeError(f"ptxas failed for {launch.kernel.__name__}: {info}")
    registers = int(re.search(r"Used (\d+) registers", info).group(1))
    spills = re.search(r"(\d+) bytes spill stores", info)
    return Report(
        launch.kernel.__name__, registers, int(spills.group(1)) if spills else 0,
        compiled.metadata.shared,
    )  # fmt: skip


def _example_launches() -> list[Launch]:
    """Every wrapper called once per dtype family on model-sized shapes, recorded not run."""
    import kernels.reference as ref
    from kernels import activation, cache, decode_attention, lora, norm, prefill_attention, rotary

    launches: list[Launch] = []
    for dtype in (torch.bfloat16, torch.float32):
        q = torch.randn(8, 32, 128).to(dtype)
        kv = torch.randn(16, 16, 8, 128).to(dtype)
        tables = torch.arange(16, dtype=torch.int32).view(2, 8)
        seq_lens = torch.tensor([100, 128], dtype=torch.int32)
        with recorded_launches(decode_attention) as recorded:
            # GQA groups of 4 and 1; one partition, then several and the reduce
            for num_heads in (32, 8) if dtype == torch.bfloat16 else (32,):
                query = q[:2, :num_heads]
                decode_attention.paged_decode_attention(query, kv, kv, tables, seq_lens, 0.1, 128)
                decode_attention.paged_decode_attention(query, kv, kv, tables, seq_lens, 0.1, 2048)
            # a batch large enough for one partition per sequence (decode_partitioning)
            many = 64
            decode_attention.paged_decode_attention(
                q[:1].repeat(many, 1, 1), kv, kv, tables[:1].repeat(many, 1),
                seq_lens[:1].repeat(many), 0.1, 4096,
            )  # fmt: skip
        launches += recorded
        with recorded_launches(prefill_attention) as recorded:
            qsl = torch.tensor([0, 3, 8], dtype=torch.int32)
            prefill_attention.paged_prefill_attention(q, kv, kv, tables, qsl, seq_lens, 0.1, 5)
        launches += recorded
        with recorded_launches(lora) as recorded:
            segments = ref.lora_segments(torch.tensor([0, -1, 1, 3, 2, 0, 1, -1]), 4)
            x = torch.randn(8, 4096).to(dtype)
            y = lora.lora_shrink(x, torch.randn(4, 16, 4096).to(dtype), segments)
            lora.lora_expand(y, torch.randn(4, 4096, 16).to(dtype), segments, x)
        launches += recorded
    x = torch.randn(4, 4096).to(torch.bfloat16)
    with recorded_launches(norm) as recorded:
        norm.rms_norm(x, x[0], 1e-6)
        norm.fused_add_rms_norm(x, x, x[0], 1e-6)
        norm.rms_norm(torch.randn(4, 128).to(torch.bfloat16), x[0, :128], 1e-6)  # q/k norm
    launches += recorded
    with recorded_launches(activation) as recorded:
        activation.silu_and_mul(torch.randn(4, 2 * 14336).to(torch.bfloat16))
    launches += recorded
    with recorded_launches(rotary) as recorded:
        qkv = torch.randn(4, 48 * 128).to(torch.bfloat16)
        query, key = (
            qkv[:, : 32 * 128].view(4, 32, 128),
            qkv[:, 32 * 128 : 40 * 128].view(4, 8, 128),
        )
        rotary.apply_rotary_embedding(
            torch.arange(4), query, key, ref.rotary_cos_sin_cache(128, 64, 10000.0)
        )
    launches += recorded
    with recorded_launches(cache) as recorded:
        key = torch.randn(4, 8, 128).to(torch.bfloat16)
        cache.reshape_and_cache(
            key, key, kv.to(torch.bfloat16), kv.to(torch.bfloat16), torch.arange(4)
        )
    launches += recorded
    return launches


def main() -> None:
    """Compile every example launch for sm_90; one JSON report per line, launch order."""
    import json
    from dataclasses import asdict

    for launch in _example_launches():
        report = compile_for_sm90(launch)
        print(json.dumps({**asdict(report), "options": launch.options}), flush=True)


if __name__ == "__main__":
    main()
