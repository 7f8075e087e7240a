"""Kernel benchmark on a CUDA GPU: every Triton kernel against its PyTorch reference.

    python bench/kernels.py [--out results.json] [--quick]

Each kernel is first checked against its reference on the benchmark's own inputs (relative
error; the run exits with status 1 if any exceeds 2e-2), then timed (median of CUDA-event
timings) beside the reference, torch.compile of the reference, or PyTorch SDPA where that is the
meaningful comparison. Memory-bound kernels report achieved bandwidth as a fraction of a
device-to-device copy, matrix-bound ones FLOP/s as a fraction of a large bf16 matmul; both
ceilings are measured at the start of the same run. Paged decode at batch 64 and context 2048
must reach 70% of the copy bandwidth; the decode kernel's tilings are swept to find its best.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run as a script, Python puts bench/ first on sys.path, and this very file would then shadow
# the ``kernels`` package: put the repository root there instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(REPO)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DECODE_TARGET = 0.70  # fraction of copy bandwidth, issue 8
MAX_REL_ERROR = 2e-2  # bf16 operands land between 1e-3 and 1e-2


@dataclass(frozen=True)
class Sizes:
    """Problem sizes: FULL for the GPU, SMOKE to run the script's logic on the CPU interpreter."""

    decode_batch: int = 64
    decode_context: int = 2048
    decode_partitions: tuple[int, ...] = (256, 512, 1024, 2048)
    decode_tiles: tuple[int, ...] = (32, 64, 128)
    decode_warps: tuple[int, ...] = (4, 8)
    head_dim: int = 128
    block_size: int = 16
    prefill_seqs: int = 8
    prefill_context: int = 2048
    prefill_chunk: int = 512  # query tokens of the prefix-cached case
    tokens: int = 16384
    hidden: int = 4096
    intermediate: int = 14336
    cache_blocks: int = 2048
    lora_tokens: int = 4096
    lora_rank: int = 16
    lora_slots: int = 4
    # (label, query heads, KV heads): decode runs both model shapes, the rest the first
    heads: tuple[tuple[str, int, int], ...] = (("Llama-3.1-8B", 32, 8), ("Qwen3-0.6B", 16, 8))
    compile: bool = True


FULL = Sizes()
SMOKE = Sizes(
    decode_batch=2, decode_context=40, decode_partitions=(16, 64), decode_tiles=(16,),
    decode_warps=(4,), head_dim=16, block_size=8, prefill_seqs=2, prefill_context=24,
    prefill_chunk=8, tokens=4, hidden=32, intermediate=24, cache_blocks=4, lora_tokens=8,
    lora_slots=2, heads=(("tiny", 4, 2),), compile=False,
)  # fmt: skip


@dataclass
class Row:
    kernel: str
    impl: str
    ms: float
    measure: str  # "GB/s" or "TFLOP/s"
    achieved: float
    fraction: float  # of the matching ceiling
    rel_error: float | None = None
    note: str = ""


def require_cuda() -> None:
    if not torch.cuda.is_available():
        sys.exit(
            f"{Path(sys.argv[0]).name} needs a CUDA GPU and none is visible "
            "(torch.cuda.is_available() is False). Run it on a GPU machine; "
            "CPU correctness is covered by `pytest tests/kernels` under TRITON_INTERPRET=1."
        )


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; infinite if out holds a NaN or an infinity."""
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return math.inf
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


class Bench:
    def __init__(self, ceilings, sizes: Sizes, device: str, dtype: torch.dtype, quick: bool):
        self.ceilings = ceilings
        self.sizes = sizes
        self.device = device
        self.dtype = dtype
        self.quick = quick
        self.rows: list[Row] = []

    def randn(self, *shape, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, device=self.device) * scale).to(self.dtype)

    def time(self, fn) -> float:
        from kernels.ceilings import median_ms

        return median_ms(
            fn, device=self.device, warmup_ms=10 if self.quick else 25,
            rep_ms=50 if self.quick else 200,
        )  # fmt: skip

    def memory(self, kernel, impl, fn, num_bytes, err=None, note="") -> Row:
        rate = num_bytes / (self.time(fn) * 1e-3)
        return self._add(kernel, impl, num_bytes / rate * 1e3, "GB/s", rate / 1e9,
                         rate / self.ceilings.copy_bytes_per_s, err, note)  # fmt: skip

    def compute(self, kernel, impl, fn, flops, err=None, note="") -> Row:
        rate = flops / (self.time(fn) * 1e-3)
        return self._add(kernel, impl, flops / rate * 1e3, "TFLOP/s", rate / 1e12,
                         rate / self.ceilings.matmul_flops_per_s, err, note)  # fmt: skip

    def compiled(self, kernel, reference, args, num_bytes) -> None:
        if not self.sizes.compile:
            return
        try:
            compiled = torch.compile(reference, dynamic=False)
            compiled(*args)
            self.memory(kernel, "torch.compile(reference)", lambda: compiled(*args), num_bytes)
        except Exception as error:  # report it; one failure must not end the whole run
            self._add(kernel, "torch.compile(reference)", math.nan, "GB/s", math.nan, math.nan,
                      None, f"failed: {error!r}"[:120])  # fmt: skip

    def _add(self, *fields) -> Row:
        row = Row(*fields)
        self.rows.append(row)
        return row


def paged_inputs(b: Bench, seq_lens, num_heads, num_kv_heads, query_len=1):
    """A paged cache with every sequence's blocks scattered at random, plus matching queries."""
    s = b.sizes
    blocks_per_seq = [-(-n // s.block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq)
    key_cache = b.randn(num_blocks, s.block_size, num_kv_heads, s.head_dim)
    value_cache = b.randn(num_blocks, s.block_size, num_kv_heads, s.head_dim)
    order = torch.randperm(num_blocks).to(torch.int32)
    block_tables = torch.zeros(len(seq_lens), max(blocks_per_seq), dtype=torch.int32)
    used = 0
    for i, count in enumerate(blocks_per_seq):
        block_tables[i, :count] = order[used : used + count]
        used += count
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32, device=b.device)
    query = b.randn(len(seq_lens) * query_len, num_heads, s.head_dim)
    return query, key_cache, value_cache, block_tables.to(b.device), seq_lens_t


def bench_decode(
    b: Bench, name: str, num_heads: int, num_kv_heads: int, shape: tuple[int, int] | None = None
) -> None:
    import kernels
    import kernels.reference as ref
    from kernels import decode_attention

    s = b.sizes
    batch, context = shape or (s.decode_batch, s.decode_context)
    q, kc, vc, bt, sl = paged_inputs(b, [context] * batch, num_heads, num_kv_heads)
    args = (q, kc, vc, bt, sl, s.head_dim**-0.5, context)
    kv_bytes = 2 * batch * context * num_kv_heads * s.head_dim * kc.element_size()
    num_bytes = kv_bytes + 2 * q.numel() * q.element_size() + bt.numel() * 4
    expected = ref.paged_decode_attention(*args)
    kernel = f"paged decode {name} (b{batch} ctx{context} H{num_heads}/{num_kv_heads})"
    best = None
    for partition in s.decode_partitions:
        for tile in (t for t in s.decode_tiles if t <= partition):
            for warps in s.decode_warps:

                def run(p=partition, t=tile, w=warps):
                    return decode_attention._launch(*args, p, tile_tokens=t, num_warps=w)

                err = rel_error(run(), expected)
                row = b.memory(kernel, f"triton p{partition} t{tile} w{warps}", run, num_bytes, err)
                if err < MAX_REL_ERROR and (best is None or row.ms < best.ms):
                    best = row
    if best is None:
        print(f"  {kernel}: no configuration agreed with the reference", flush=True)
        return
    verdict = "meets" if best.fraction >= DECODE_TARGET else "MISSES"
    b._add(kernel, f"triton best: {best.impl.removeprefix('triton ')}", best.ms, best.measure,
           best.achieved, best.fraction, best.rel_error,
           f"{verdict} the {DECODE_TARGET:.0%} target")  # fmt: skip
    out = kernels.paged_decode_attention(*args)
    b.memory(kernel, "triton default", lambda: kernels.paged_decode_attention(*args), num_bytes,
             rel_error(out, expected))  # fmt: skip
    b.memory(kernel, "torch reference", lambda: ref.paged_decode_attention(*args), num_bytes,
             note="per-sequence gather, float32 math")  # fmt: skip
    # Dense SDPA over contiguous K/V of the same size: what attention costs without paging.
    k_dense = b.randn(batch, num_kv_heads, context, s.head_dim)
    v_dense = b.randn(batch, num_kv_heads, context, s.head_dim)
    q_dense = q.view(batch, num_heads, 1, s.head_dim)
    b.memory(
        kernel, "torch SDPA, dense contiguous KV",
        lambda: F.scaled_dot_product_attention(q_dense, k_dense, v_dense, enable_gqa=True),
        num_bytes, note="no paging: the dense reference point",
    )  # fmt: skip


def bench_prefill(b: Bench, label: str, query_len: int) -> None:
    import kernels
    import kernels.reference as ref

    s = b.sizes
    num_seqs, context = s.prefill_seqs, s.prefill_context
    _, num_heads, num_kv_heads = s.heads[0]
    q, kc, vc, bt, sl = paged_inputs(
        b, [context] * num_seqs, num_heads, num_kv_heads, query_len=query_len
    )
    qsl = torch.arange(0, num_seqs + 1, dtype=torch.int32, device=b.device) * query_len
    args = (q, kc, vc, bt, qsl, sl, s.head_dim**-0.5, query_len)
    prefix = context - query_len
    visible = query_len * prefix + query_len * (query_len + 1) / 2  # keys seen, per head
    flops = 4 * num_seqs * num_heads * s.head_dim * visible
    err = rel_error(kernels.paged_prefill_attention(*args), ref.paged_prefill_attention(*args))
    kernel = f"paged prefill {label} (H{num_heads}/{num_kv_heads} d{s.head_dim})"
    b.compute(kernel, "triton", lambda: kernels.paged_prefill_attention(*args), flops, err)
    if prefix == 0:
        qd = q.view(num_seqs, query_len, num_heads, s.head_dim).transpose(1, 2)
        kd = b.randn(num_seqs, num_kv_heads, context, s.head_dim)
        vd = b.randn(num_seqs, num_kv_heads, context, s.head_dim)
        b.compute(
            kernel, "torch SDPA causal, dense KV",
            lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, enable_gqa=True),
            flops, note="no paging",
        )  # fmt: skip
    b.compute(kernel, "torch reference", lambda: ref.paged_prefill_attention(*args), flops)


def bench_norms(b: Bench) -> None:
    import kernels
    import kernels.reference as ref

    s, eps = b.sizes, 1e-5
    x, residual = b.randn(s.tokens, s.hidden), b.randn(s.tokens, s.hidden)
    weight = b.randn(s.hidden)
    size = x.numel() * x.element_size()
    name = f"rms_norm {s.tokens}x{s.hidden}"
    err = rel_error(kernels.rms_norm(x, weight, eps), ref.rms_norm(x, weight, eps))
    b.memory(name, "triton", lambda: kernels.rms_norm(x, weight, eps), 2 * size, err)
    b.memory(name, "torch reference", lambda: ref.rms_norm(x, weight, eps), 2 * size)
    b.compiled(name, ref.rms_norm, (x, weight, eps), 2 * size)

    name = f"fused_add_rms_norm {s.tokens}x{s.hidden}"
    args = (x, residual, weight, eps)
    err = rel_error(kernels.fused_add_rms_norm(*args)[0], ref.fused_add_rms_norm(*args)[0])
    b.memory(name, "triton", lambda: kernels.fused_add_rms_norm(*args), 4 * size, err)
    b.memory(name, "torch reference", lambda: ref.fused_add_rms_norm(*args), 4 * size)
    b.compiled(name, ref.fused_add_rms_norm, args, 4 * size)


def bench_activation_rotary_cache(b: Bench) -> None:
    import kernels
    import kernels.reference as ref

    s = b.sizes
    gate_up = b.randn(s.tokens, 2 * s.intermediate)
    nbytes = 3 * s.tokens * s.intermediate * gate_up.element_size()
    name = f"silu_and_mul {s.tokens}x{s.intermediate}"
    err = rel_error(kernels.silu_and_mul(gate_up), ref.silu_and_mul(gate_up))
    b.memory(name, "triton", lambda: kernels.silu_and_mul(gate_up), nbytes, err)
    b.memory(name, "torch reference", lambda: ref.silu_and_mul(gate_up), nbytes)
    b.compiled(name, ref.silu_and_mul, (gate_up,), nbytes)

    (_, num_heads, num_kv_heads), d = s.heads[0], s.head_dim
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    cache = ref.rotary_cos_sin_cache(d, 8192, 500000.0, scaling, device=b.device)
    positions = torch.randint(0, 8192, (s.tokens,), device=b.device)
    qkv = b.randn(s.tokens, (num_heads + 2 * num_kv_heads) * d)
    query = qkv[:, : num_heads * d].view(s.tokens, num_heads, d)
    key = qkv[:, num_heads * d : (num_heads + num_kv_heads) * d].view(s.tokens, num_kv_heads, d)
    args = (positions, query, key, cache)
    nbytes = 2 * s.tokens * (num_heads + num_kv_heads) * d * qkv.element_size() + s.tokens * d * 4
    name = f"rotary {s.tokens} tok H{num_heads}/{num_kv_heads} d{d}"
    got, expected = kernels.apply_rotary_embedding(*args), ref.apply_rotary_embedding(*args)
    err = max(rel_error(got[0], expected[0]), rel_error(got[1], expected[1]))
    b.memory(name, "triton", lambda: kernels.apply_rotary_embedding(*args), nbytes, err)
    b.memory(name, "torch reference", lambda: ref.apply_rotary_embedding(*args), nbytes)
    b.compiled(name, ref.apply_rotary_embedding, args, nbytes)

    key_new = b.randn(s.tokens, num_kv_heads, d)
    value_new = b.randn(s.tokens, num_kv_heads, d)
    shape = (s.cache_blocks, s.block_size, num_kv_heads, d)
    kc, vc = b.randn(*shape), b.randn(*shape)
    kr, vr = kc.clone(), vc.clone()
    slots = torch.randperm(s.cache_blocks * s.block_size)[: s.tokens].to(b.device)
    kernels.reshape_and_cache(key_new, value_new, kc, vc, slots)
    ref.reshape_and_cache(key_new, value_new, kr, vr, slots)
    err = 0.0 if torch.equal(kc, kr) and torch.equal(vc, vr) else math.inf
    nbytes = 4 * key_new.numel() * key_new.element_size() + slots.numel() * 8
    name = f"reshape_and_cache {s.tokens} tok"
    args = (key_new, value_new, kc, vc, slots)
    b.memory(name, "triton", lambda: kernels.reshape_and_cache(*args), nbytes, err)
    b.memory(name, "torch reference", lambda: ref.reshape_and_cache(*args), nbytes)


def bench_lora(b: Bench) -> None:
    import kernels
    import kernels.reference as ref

    s = b.sizes
    tokens, hidden, rank, slots = s.lora_tokens, s.hidden, s.lora_rank, s.lora_slots
    indices = torch.randint(-1, slots, (tokens,), device=b.device)
    segments = ref.lora_segments(indices, slots)
    x = b.randn(tokens, hidden)
    lora_a = b.randn(slots, rank, hidden, scale=hidden**-0.5)
    lora_b = b.randn(slots, hidden, rank, scale=rank**-0.5)
    y = kernels.lora_shrink(x, lora_a, segments)
    err = rel_error(y, ref.lora_shrink(x, lora_a, segments))
    item = x.element_size()
    nbytes = x.numel() * item + lora_a.numel() * item + y.numel() * 4
    name = f"lora_shrink {tokens}x{hidden} r{rank} {slots} slots"
    b.memory(name, "triton", lambda: kernels.lora_shrink(x, lora_a, segments), nbytes, err)
    b.memory(name, "torch reference", lambda: ref.lora_shrink(x, lora_a, segments), nbytes)
    b.memory(name, "lora_segments, once per step", lambda: ref.lora_segments(indices, slots),
             indices.numel() * 8, note="shared by every LoRA layer of a step")  # fmt: skip

    out = b.randn(tokens, hidden)
    expected = ref.lora_expand(y, lora_b, segments, out.clone())
    err = rel_error(kernels.lora_expand(y, lora_b, segments, out.clone()), expected)
    nbytes = y.numel() * 4 + lora_b.numel() * item + 2 * out.numel() * item
    name = f"lora_expand {tokens}x{hidden} r{rank} {slots} slots"
    b.memory(name, "triton", lambda: kernels.lora_expand(y, lora_b, segments, out), nbytes, err)
    b.memory(name, "torch reference", lambda: ref.lora_expand(y, lora_b, segments, out), nbytes)


def run(sizes: Sizes = FULL, device: str = "cuda", dtype=torch.bfloat16, quick=False) -> Bench:
    """Measure the ceilings, then check and time every kernel; returns every row."""
    from kernels.ceilings import measure_ceilings

    torch.manual_seed(0)
    b = Bench(measure_ceilings(device), sizes, device, dtype, quick)
    for label, num_heads, num_kv_heads in sizes.heads:
        bench_decode(b, label, num_heads, num_kv_heads)
    bench_prefill(b, f"fresh {sizes.prefill_seqs}x{sizes.prefill_context}", sizes.prefill_context)
    bench_prefill(
        b,
        f"{sizes.prefill_seqs}x{sizes.prefill_chunk} on a "
        f"{sizes.prefill_context - sizes.prefill_chunk} prefix",
        sizes.prefill_chunk,
    )
    bench_norms(b)
    bench_activation_rotary_cache(b)
    bench_lora(b)
    return b


def parse_shapes(text: str) -> list[tuple[int, int]]:
    try:
        shapes = [tuple(int(n) for n in item.split("x")) for item in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(shape) != 2 or min(shape) < 1 for shape in shapes):
        sys.exit(f"--decode-shapes: expected BATCHxCONTEXT[,BATCHxCONTEXT...], got {text!r}")
    return shapes


def run_decode_shapes(shapes, sizes: Sizes = FULL, device="cuda", dtype=torch.bfloat16,
                      quick=False) -> Bench:  # fmt: skip
    """The decode sweep alone at other (batch, context) shapes: for choosing the default
    partition size, which trades the reduce pass against idle multiprocessors."""
    from kernels.ceilings import measure_ceilings

    torch.manual_seed(0)
    b = Bench(measure_ceilings(device), sizes, device, dtype, quick)
    for shape in shapes:
        for label, num_heads, num_kv_heads in sizes.heads:
            bench_decode(b, label, num_heads, num_kv_heads, shape)
    return b


def disagreements(b: Bench) -> list[Row]:
    return [r for r in b.rows if r.rel_error is not None and not r.rel_error < MAX_REL_ERROR]


def print_table(b: Bench) -> None:
    c = b.ceilings
    print(
        f"\ncopy bandwidth {c.copy_bytes_per_s / 1e9:,.0f} GB/s, "
        f"matmul {c.matmul_flops_per_s / 1e12:,.1f} TFLOP/s (measured in this run)"
    )
    header = (
        f"{'kernel':46} {'implementation':32} {'ms':>9} {'rate':>16} {'of ceil':>8} {'rel err':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in b.rows:
        if r.impl.startswith("triton p"):
            continue  # the sweep's rows are in the JSON; its best is printed
        err = "" if r.rel_error is None else f"{r.rel_error:.1e}"
        digits = 0 if r.measure == "GB/s" else 1
        rate = f"{r.achieved:,.{digits}f} {r.measure}"
        print(
            f"{r.kernel[:46]:46} {r.impl[:32]:32} {r.ms:9.4f} {rate:>16} {r.fraction:8.1%} "
            f"{err:>8} {r.note}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="write every timing (the sweep too) as JSON")
    parser.add_argument("--quick", action="store_true", help="shorter timing loops")
    parser.add_argument(
        "--decode-shapes",
        help="only the decode sweep, at these BATCHxCONTEXT shapes (e.g. 1x8192,256x1024)",
    )
    args = parser.parse_args()
    require_cuda()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if args.decode_shapes:
        b = run_decode_shapes(parse_shapes(args.decode_shapes), quick=args.quick)
    else:
        b = run(quick=args.quick)
    print_table(b)
    if args.out:
        report = {"device": torch.cuda.get_device_name(), "ceilings": asdict(b.ceilings),
                  "rows": [asdict(r) for r in b.rows]}  # fmt: skip
        args.out.write_text(json.dumps(report, indent=2))
    bad = disagreements(b)
    if bad:
        sys.exit(
            f"{len(bad)} kernel result(s) disagree with their reference: "
            + ", ".join(f"{r.kernel} [{r.impl}] {r.rel_error:.2e}" for r in bad)
        )


if __name__ == "__main__":
    main()
