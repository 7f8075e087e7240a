"""Greedy output of the quantized model against the unquantized one (issue 16, item 4).

20 chat prompts x 64 greedy tokens on the demo SmolLM2-135M-Instruct (or --model), once per
variant in one batch. Per quantized variant it prints the match rate of greedy tokens (same
token at the same position, over all 20 x 64) and the mean length of the common prefix, then
the answer to "What is the capital of France?". A dtype (bf16) can be compared as well, as a
baseline of how far rounding alone goes.

Which kernels the quantized variants run depends on the batch: up to 8 rows a step, the
decode kernels (int4 and the LM head against activations quantized to 8 bits per block of 32,
as llama.cpp does; int8 projections in float32); past 8, dequantize-then-GEMM in float32.
All 20 prompts run as one batch by default; ``--max-num-seqs 4`` measures what a user of
up to 8 concurrent streams gets.

    .venv/bin/python bench/quant_quality.py                       # int8 and int4 vs fp32
    .venv/bin/python bench/quant_quality.py --model PATH --variants bf16,int8
    .venv/bin/python bench/quant_quality.py --max-num-seqs 4      # through the decode kernels
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.single_stream import demo_checkpoint, parse_variant

PROMPTS = [
    "What is the capital of France?",
    "Explain photosynthesis in two sentences.",
    "Write a haiku about the sea.",
    "List three uses for a paperclip.",
    "What is 12 times 7?",
    "Who wrote Romeo and Juliet?",
    "Give me a tip for learning a new language.",
    "Describe a cat to someone who has never seen one.",
    "What causes rain?",
    "Translate 'good morning' into Spanish.",
    "Why is the sky blue?",
    "Suggest a name for a coffee shop.",
    "What is the boiling point of water in Celsius?",
    "Write one sentence about autumn.",
    "How do I make a cup of tea?",
    "What is a prime number?",
    "Name the planets of the solar system.",
    "What does a computer's CPU do?",
    "Tell me a fun fact about octopuses.",
    "How many days are there in a leap year?",
]
NEW_TOKENS = 64


def greedy(
    model: Path, variant: str, prompts: list[list[int]], max_num_seqs: int | None = None
) -> list[list[int]]:
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine(
        EngineConfig(
            model=str(model),
            device="cpu",
            max_model_len=max(map(len, prompts)) + NEW_TOKENS + 16,
            max_num_seqs=max_num_seqs or len(prompts),
            **parse_variant(variant),
        )
    )
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params)
    tokens: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    while engine.has_unfinished_requests():
        for delta in engine.step():
            tokens[delta.request_id].extend(delta.new_token_ids)
    return [tokens[str(i)] for i in range(len(prompts))]


def compare(reference: list[list[int]], other: list[list[int]]) -> tuple[float, float]:
    """(positional match rate, mean common-prefix length / NEW_TOKENS)."""
    same = total = prefix = 0
    for ref, out in zip(reference, other, strict=True):
        same += sum(a == b for a, b in zip(ref, out, strict=True))
        total += len(ref)
        n = next((i for i, (a, b) in enumerate(zip(ref, out, strict=True)) if a != b), len(ref))
        prefix += n
    return same / total, prefix / total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the demo SmolLM2")
    parser.add_argument("--variants", default="int8,int4", help="as bench/single_stream.py's")
    parser.add_argument(
        "--max-num-seqs", type=int, default=None, help="sequences a step (default: all prompts)"
    )
    args = parser.parse_args()

    from engine.text.tokenizer import ChatTokenizer

    var_dir = Path(os.environ.get("PLATFORM_VAR_DIR", Path(__file__).resolve().parents[1] / "var"))
    model = args.model or demo_checkpoint(var_dir)
    tokenizer = ChatTokenizer(model)
    prompts = [
        tokenizer.encode(tokenizer.render_chat([{"role": "user", "content": p}])) for p in PROMPTS
    ]
    reference = greedy(model, "fp32", prompts, args.max_num_seqs)
    print(f"fp32: {tokenizer.decode(reference[0])!r}", flush=True)
    for variant in args.variants.split(","):
        outputs = greedy(model, variant, prompts, args.max_num_seqs)
        rate, prefix = compare(reference, outputs)
        print(
            f"{variant}: greedy tokens matching fp32 {rate:.1%} ({len(PROMPTS)} prompts x "
            f"{NEW_TOKENS} tokens), common prefix {prefix:.1%}; capital of France: "
            f"{tokenizer.decode(outputs[0])!r}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
