"""bench/cpu_vs_vllm.py's online half: the whole platform vs ``vllm serve``, measured by vLLM's
own benchmark client (``vllm bench serve``'s module, run from the vLLM peer's venv).

Ours is what ``bin/serve`` runs, minus Celery: a private Redis, a migrated SQLite database
with one tenant and key, one engine process and one Daphne; requests go through
authentication, admission, tokenization, the engine over Redis, detokenization and SSE.
vLLM's is ``python -m vllm.entrypoints.openai.api_server`` on the same checkpoint and dtype.
Both servers start once, one after the other, and stay up; each round runs the client
against one and then the other (the order alternates between rounds), so only the server
being measured is busy.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from bench import peers
from bench.cpu_vs_vllm import checkpoint, process_tree_peak_rss

REPO = peers.REPO
MODEL_NAME = "bench"
CLIENT = """
import json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
result = main(parser.parse_args(sys.argv[1:]))
print("@@result " + json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}))
"""


@contextmanager
def our_platform(
    model: Path,
    dtype: str,
    workdir: Path,
    logdir: Path,
    profile: bool,
    threads: int | None = None,
    fixed_threads: bool = False,
    nice: int | None = None,
):
    """The platform serving ``model``: yields (base URL, API key, {name: pid})."""
    from bench.served_platform import served_platform

    wrapper: list[str] = []
    if profile:  # py-spy records the API process for the whole round
        out = logdir / "online-ours-daphne.folded.txt"
        wrapper = [str(Path(sys.executable).parent / "py-spy"), "record", "-o", str(out)]
        wrapper += ["-f", "raw", "-r", "500", "--"]
    with served_platform(
        workdir,
        model,
        model_name=MODEL_NAME,
        max_model_len=4096,
        # The benchmark measures serving, not failover: on a starved shared machine a request
        # queued behind 63 others can hear nothing for the default 30 s, and the client would
        # then resume it elsewhere (here: on the same engine), doubling its work.
        env={"ENGINE_SILENCE_TIMEOUT": "600"},
        log_dir=logdir,
        log_prefix="online-ours-",
        engine_options={
            "dtype": dtype,
            "cpu_threads": threads,
            "fixed_cpu_threads": fixed_threads,
            "nice": nice,
        },
        daphne_wrapper=wrapper,
    ) as served:
        try:
            yield (
                served.base_url,
                served.key,
                {
                    "engine": served.engine.pid,
                    "daphne": served.daphne.pid,
                },
            )
        finally:
            # SIGINT lets py-spy write its profile; everything else takes SIGTERM.
            if profile and served.daphne.running():
                served.daphne.process.send_signal(2)
                try:
                    served.daphne.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    pass


@contextmanager
def vllm_server(python: Path, model: Path, dtype: str, logdir: Path):
    """``vllm serve`` (its OpenAI server module) on ``model``: yields (base URL, key, pids)."""
    from controlplane.launcher.redis_server import free_port
    from controlplane.launcher.stack import Stack, http_ok

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    # The KV budget ours has by default (1 GiB; 87k tokens of this model, 12k needed).
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    command += ["--served-model-name", MODEL_NAME, "--dtype", dtype, "--max-model-len", "4096"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--seed", "0"]
    # The peer is started and waited for the way our own processes are.
    with Stack(logdir) as stack:
        server = stack.start(
            "vllm serve",
            command,
            ready=lambda: http_ok(f"{base_url}/health"),
            timeout=1500,
            stop_timeout=30,
            log=logdir / "online-vllm.log",
            env=env,
        )
        yield base_url, "", {"server": server.pid}


def run_client(
    python: Path, base_url: str, key: str, model: Path, args, logdir: Path, seed: int = 0
) -> dict:
    """vLLM's client against one server; ``seed`` picks the random prompts (each round has its
    own, the same for both servers, so no round is served from a prefix cache it filled)."""
    result_dir = Path(tempfile.mkdtemp(dir=logdir))
    command = [str(python), "-c", CLIENT, "--backend", "openai", "--base-url", base_url]
    command += ["--endpoint", "/v1/completions", "--model", MODEL_NAME, "--tokenizer", str(model)]
    command += ["--dataset-name", "random", "--random-input-len", str(args.input_len)]
    command += ["--random-output-len", str(args.output_len), "--num-prompts", str(args.num_prompts)]
    command += ["--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", str(seed)]
    command += ["--disable-tqdm"]
    command += ["--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99"]
    env = {**os.environ, "OPENAI_API_KEY": key} if key else dict(os.environ)
    env.pop("OPENAI_API_KEY", None) if not key else None
    output = subprocess.run(
        command, cwd=result_dir, env=env, capture_output=True, text=True, timeout=1800
    )
    (logdir / "online-client.log").open("a").write(output.stdout + output.stderr)
    for line in output.stdout.splitlines():
        if line.startswith("@@result "):
            return json.loads(line[len("@@result ") :])
    raise SystemExit(
        f"the benchmark client failed:\n{output.stdout[-3000:]}{output.stderr[-3000:]}"
    )


def online(args) -> None:
    machine = peers.machine_line()
    print(machine, flush=True)
    vllm_python = peers.ensure_vllm()
    logdir = peers.var_dir() / "bench" / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    model = checkpoint("small")
    sides = ["ours", "vllm"]
    results: dict[str, list[dict]] = {s: [] for s in sides}
    # Both servers start once (one after the other) and stay up; the rounds alternate the
    # client between them, so vLLM's start-up compilation is paid once, and the server not
    # being measured sits idle.
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="online-bench-")))
        servers = {
            "ours": stack.enter_context(
                our_platform(
                    model,
                    "float32",
                    tmp,
                    logdir,
                    args.profile,
                    args.engine_threads,
                    args.fixed_engine_threads,
                    args.engine_nice,
                )
            ),
            "vllm": stack.enter_context(vllm_server(vllm_python, model, "float32", logdir)),
        }
        # One short run each first: first-request costs (imports, compilation) stay out.
        warm = type(args)(**{**vars(args), "num_prompts": 4, "output_len": 8})
        for base_url, key, _pids in servers.values():
            run_client(vllm_python, base_url, key, model, warm, logdir)
        for round_index in range(args.rounds):
            for side in sides if round_index % 2 == 0 else reversed(sides):
                base_url, key, pids = servers[side]
                r = run_client(vllm_python, base_url, key, model, args, logdir, round_index + 1)
                # vLLM's engine core and worker are children of its server: counted with it.
                r["peak_rss_mib"] = {name: process_tree_peak_rss(pid) for name, pid in pids.items()}
                results[side].append(r)
                print(
                    f"round {round_index + 1} {side:5s} {r['output_throughput']:8.1f} output tok/s, "
                    f"TTFT p50 {r['median_ttft_ms']:7.1f} ms, ITL p50 {r['median_itl_ms']:6.1f} ms, "
                    f"{r['completed']} completed, {r.get('failed', 0)} failed; peak RSS "
                    + ", ".join(f"{k} {v:.0f} MiB" for k, v in r["peak_rss_mib"].items() if v),
                    flush=True,
                )
    med = {
        side: {
            metric: peers.median([r[metric] for r in results[side]])
            for metric in ("output_throughput", "median_ttft_ms", "median_itl_ms")
        }
        for side in sides
    }
    ratio = med["ours"]["output_throughput"] / med["vllm"]["output_throughput"]
    lines = [
        "| server | output tok/s per round | median output tok/s | TTFT p50 (median) | "
        "ITL p50 (median) | peak RSS (last round) |",
        "|---|---|---|---|---|---|",
    ]
    for side, label in (("ours", "this platform (Daphne+Redis+engine)"), ("vllm", "vllm serve")):
        rss = results[side][-1]["peak_rss_mib"]
        per_round = ", ".join(f"{r['output_throughput']:.1f}" for r in results[side])
        lines.append(
            f"| {label} | {per_round} | "
            f"{med[side]['output_throughput']:.1f} | {med[side]['median_ttft_ms']:.0f} ms | "
            f"{med[side]['median_itl_ms']:.1f} ms | "
            + ", ".join(f"{k} {v:.0f} MiB" for k, v in rss.items() if v)
            + " |"
        )
    lines.append("")
    lines.append(
        f"Output throughput ratio (ours / vLLM): **{ratio:.2f}**; TTFT p50 ratio "
        f"{med['ours']['median_ttft_ms'] / med['vllm']['median_ttft_ms']:.2f}, ITL p50 ratio "
        f"{med['ours']['median_itl_ms'] / med['vllm']['median_itl_ms']:.2f} (lower is better)."
    )
    peers.record(
        "CPU online: the platform vs vllm serve, vLLM's bench client (bench/cpu_vs_vllm.py online)",
        f".venv/bin/python bench/cpu_vs_vllm.py online --rounds {args.rounds} --num-prompts "
        f"{args.num_prompts} --input-len {args.input_len} --output-len {args.output_len}"
        + (f" --engine-threads {args.engine_threads}" if args.engine_threads else "")
        + (" --fixed-engine-threads" if args.fixed_engine_threads else "")
        + (f" --engine-nice {args.engine_nice}" if args.engine_nice is not None else ""),
        machine,
        lines,
    )
    print("\n".join(lines))
    print(f"online, small llama fp32: ours / vllm serve output tok/s = {ratio:.2f}x")
