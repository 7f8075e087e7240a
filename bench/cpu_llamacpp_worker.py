"""One side of bench/cpu_vs_llamacpp.py: one stream of greedy tokens, in a process of its own.

``--system ours`` (the project's venv) runs engine.LLM on a safetensors checkpoint;
``--system llamacpp`` (the llama-cpp-python peer's venv) runs llama.cpp on the GGUF file.
Both get the same prompt token ids, generate ``--tokens`` tokens past any end-of-sequence and
print one ``@@result {json}`` line: decode tokens/s (tokens after the first over the time
after the first), time to first token, and the process's peak RSS. Imports nothing of the
project at module level but bench/rss.py (standard library only), so the peer's interpreter
runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.rss import own_peak_rss_mib  # standard library only


def ours(model: str, prompt: list[int], num_tokens: int, threads: int, options: dict):
    import torch

    from engine import LLM, SamplingParams

    torch.set_num_threads(threads)
    # One sequence of 2,048 tokens, as llama.cpp's context (n_ctx) below: the KV cache then
    # holds what llama.cpp's does, so the peak RSS of the two compares like for like (the
    # engine's default sizes it for a server: 10% of the free memory).
    # No prefix caching: the warm-up sends the same prompt, and llama.cpp (reset=True) computes
    # it again, so a cache hit would make the TTFT column compare nothing. No speculation:
    # llama.cpp decodes one token per step here (bench/spec_decode.py measures speculation).
    options = {"enable_speculative_decoding": False, **options}
    llm = LLM(
        model,
        device="cpu",
        max_model_len=2048,
        max_num_seqs=1,
        enable_prefix_caching=False,
        **options,
    )
    engine = llm.llm_engine
    from engine.models.quantize import decode_read_bytes

    # What one decode step reads, for the driver's memory-bandwidth roofline.
    k_cache = engine.runner.kv_caches[0][0]
    config = engine.model_config
    reads = dict(
        weight_bytes=decode_read_bytes(engine.runner.model),
        kv_bytes_per_position=2
        * config.num_hidden_layers
        * config.num_key_value_heads
        * config.head_dim
        * k_cache.element_size(),
    )

    def stream(n: int) -> list[float]:
        """Times at which each token arrived (one engine step each)."""
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        request_id = f"r{time.monotonic_ns()}"
        engine.add_request(request_id, list(prompt), params)
        times: list[float] = []
        while engine.has_unfinished_requests():
            for delta in engine.step():
                times.extend(time.perf_counter() for _ in delta.new_token_ids)
        return times

    return stream, reads


def load_llama(model: str, threads: int, **kwargs):
    """llama_cpp.Llama on ``model`` (a GGUF file) with ``threads`` threads and a 2,048 context."""
    import llama_cpp.llama_cpp as low_level  # the module Llama reads its defaults from
    from llama_cpp import Llama

    # llama.cpp's AMX weight buffers (chosen on this AVX512/AMX VM) crash in llama_decode
    # here (SIGSEGV); without extra buffer types it runs its AVX512 Q4_1 kernels.
    default_params = low_level.llama_model_default_params

    def without_extra_buffers():
        params = default_params()
        params.use_extra_bufts = False
        return params

    low_level.llama_model_default_params = without_extra_buffers
    return Llama(model_path=model, n_threads=threads, n_ctx=2048, verbose=False, seed=0, **kwargs)


def llamacpp(model: str, prompt: list[int], num_tokens: int, threads: int, options: dict):
    llm = load_llama(model, threads)

    def stream(n: int) -> list[float]:
        llm.reset()
        times: list[float] = []
        # generate() samples in llama.cpp and does not stop at end-of-sequence by itself.
        for _token in llm.generate(list(prompt), top_k=1, temp=0.0, reset=True):
            times.append(time.perf_counter())
            if len(times) >= n:
                break
        return times

    return stream, {}  # llama.cpp's reads: the driver counts them from the GGUF file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", choices=("ours", "llamacpp"), required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True, help="JSON list of prompt token ids")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--options", default="{}", help="JSON engine options (ours)")
    args = parser.parse_args()
    prompt = json.loads(args.prompt)
    make = {"ours": ours, "llamacpp": llamacpp}[args.system]
    stream, reads = make(args.model, prompt, args.tokens, args.threads, json.loads(args.options))
    stream(16)  # warm-up: kernels, allocator, compilation
    start = time.perf_counter()
    times = stream(args.tokens)
    decode_s = times[-1] - times[0]
    result = {
        "tokens": len(times),
        "ttft_ms": (times[0] - start) * 1000,
        "decode_tok_per_s": (len(times) - 1) / decode_s,
        "total_tok_per_s": len(times) / (times[-1] - start),
        "peak_rss_mib": own_peak_rss_mib(),
        **reads,  # bytes one decode step reads, for the driver's roofline
    }
    print("@@result " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
