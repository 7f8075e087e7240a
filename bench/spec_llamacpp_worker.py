"""llama.cpp's side of bench/spec_decode.py: greedy generation of a list of prompts with and
without llama-cpp-python's prompt-lookup decoding (``LlamaPromptLookupDecoding``, the n-gram
draft llama.cpp users reach for on input-grounded work).

Runs in the llama-cpp-python virtualenv (bench/peers.py builds it). Reads a JSON file
``{"prompts": [[token ids], ...], "tokens": [N per prompt]}``; for each prompt, generates its N
tokens (past any end of sequence: N is what the engine's side produced for it) once plain and
once with prompt lookup, in alternating order, and answers one
``@@result {json}`` line: per prompt and side, the tokens and the seconds from the call to the
last token.

    var/peers/llamacpp/bin/python bench/spec_llamacpp_worker.py --model F.gguf --work W.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cpu_llamacpp_worker import load_llama


def generate(llm, prompt: list[int], tokens: int) -> tuple[list[int], float]:
    out: list[int] = []
    start = time.perf_counter()
    # generate() does not stop at end-of-sequence by itself; greedy as top_k=1, temp=0.
    for token in llm.generate(list(prompt), top_k=1, temp=0.0, reset=True):
        out.append(int(token))
        if len(out) >= tokens:
            break
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--work", type=Path, required=True, help="JSON: prompts and tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--draft-tokens", type=int, default=10, help="prompt lookup's k")
    args = parser.parse_args()
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    work = json.loads(args.work.read_text())
    sides = {
        "plain": load_llama(args.model, args.threads),
        "lookup": load_llama(
            args.model,
            args.threads,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=args.draft_tokens),
        ),
    }
    generate(sides["plain"], work["prompts"][0], 8)  # warm-up
    generate(sides["lookup"], work["prompts"][0], 8)
    results = []
    for index, prompt in enumerate(work["prompts"]):
        order = ["plain", "lookup"] if index % 2 == 0 else ["lookup", "plain"]
        row = {}
        for name in order:
            tokens, seconds = generate(sides[name], prompt, work["tokens"][index])
            row[name] = {"tokens": tokens, "seconds": seconds}
        results.append(row)
    print("@@result " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
