"""Peak memory of one engine serving one stream: the process's RSS after loading the model and
its peak (``ru_maxrss``) after 256 greedy tokens, per weight mode, each in a fresh process.

The KV cache is sized for one sequence of 2,048 tokens, as bench/cpu_llamacpp_worker.py sizes
it to compare with llama.cpp's n_ctx=2048. Prints a Markdown table for docs/benchmarks.md.

    .venv/bin/python bench/load_memory.py [--modes fp32,int8,int4] [--repo PATH]

``--repo`` runs another checkout's engine (e.g. a worktree of an older commit) on the same
checkpoint, for a before/after comparison in one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cpu_vs_llamacpp import converted_checkpoint, smollm2_gguf  # noqa: E402

_WORKER = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
from engine import LLM, SamplingParams

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

options = json.loads(sys.argv[3])
llm = LLM(sys.argv[2], device="cpu", max_model_len=2048, max_num_seqs=1, **options)
loaded = rss_mib()
engine = llm.llm_engine
engine.add_request("r", list(range(1, 50)), SamplingParams(temperature=0.0, max_tokens=256, ignore_eos=True))
while engine.has_unfinished_requests():
    engine.step()
print(json.dumps({"loaded_mib": loaded, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

MODES = {
    "fp32": {"dtype": "float32"},
    "int8": {"dtype": "float32", "quantization": "int8"},
    "int4": {"dtype": "float32", "quantization": "int4"},
}


def measure(repo: Path, checkpoint: Path, options: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _WORKER, str(repo), str(checkpoint), json.dumps(options)],
        capture_output=True,
        text=True,
        check=True,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="fp32,int8,int4")
    parser.add_argument("--repo", type=Path, help="also measure this checkout's engine")
    args = parser.parse_args()
    checkpoint = converted_checkpoint(smollm2_gguf())
    repos = {"this checkout": REPO, **({"--repo": args.repo} if args.repo else {})}
    print("| engine | mode | RSS after load | peak RSS (256 tokens) |")
    print("|---|---|---|---|")
    for mode in args.modes.split(","):
        for label, repo in repos.items():
            row = measure(repo, checkpoint, MODES[mode])
            print(f"| {label} | {mode} | {row['loaded_mib']:.0f} MiB | {row['peak_mib']:.0f} MiB |")


if __name__ == "__main__":
    main()
