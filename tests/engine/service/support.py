"""Helpers for service tests: engine subprocesses, a client on a private key prefix, references."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

from engine import protocol

REPO_ROOT = Path(__file__).resolve().parents[3]


class NoText:
    """A tokenizer stand-in for EngineClient.generate when a test compares token ids only."""

    def decode(self, ids, *, skip_special_tokens=True):
        return "x" * len(ids)


class EngineProcess:
    """``python -m engine`` in a subprocess, logging to a file; ``wait_live`` until its status."""

    def __init__(
        self,
        *,
        model_path: Path,
        model_name: str,
        redis_url: str,
        prefix: str,
        log_dir: Path,
        engine_id: str | None = None,
        extra: list[str] | None = None,
    ):
        self.model_name = model_name
        self.prefix = prefix
        self.engine_id = engine_id or f"eng{uuid.uuid4().hex[:8]}"
        self.redis = redis.Redis.from_url(redis_url)
        self.log_path = log_dir / f"engine-{self.engine_id}.log"
        args = [
            sys.executable,
            "-m",
            "engine",
            "--model-path",
            str(model_path),
            "--model-name",
            model_name,
            "--redis-url",
            redis_url,
            "--engine-id",
            self.engine_id,
            "--device",
            "cpu",
            *(extra or []),
        ]
        env = dict(os.environ, PLATFORM_REDIS_PREFIX=prefix, OMP_NUM_THREADS="1")
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            args, cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def status_key(self) -> str:
        return protocol.Keys(self.prefix).status(self.model_name, self.engine_id)

    def status(self) -> protocol.EngineStatus | None:
        raw = self.redis.get(self.status_key)
        return None if raw is None else protocol.decode_status(raw)

    def wait_live(self, timeout: float = 90.0) -> EngineProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"engine exited at start:\n{self.log_tail()}")
            if self.redis.exists(self.status_key):
                return self
            time.sleep(0.1)
        raise TimeoutError(f"engine not live in {timeout}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 30.0) -> int:
        if self._log.closed:
            return self.process.returncode
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        self.redis.close()
        return self.process.returncode


def serve_module_engine(
    model_path, model_name: str, redis_server, prefix: str, tmp_path_factory, *extra: str
):
    """A module fixture's body: one live engine for the module, stopped cleanly after it."""
    proc = EngineProcess(
        model_path=model_path,
        model_name=model_name,
        redis_url=redis_server.url,
        prefix=prefix,
        log_dir=tmp_path_factory.mktemp("engine-logs"),
        extra=list(extra),
    ).wait_live()
    yield proc
    assert proc.stop() == 0, proc.log_tail()


def offline_greedy(
    model_path: Path, prompts: list[list[int]], max_tokens: list[int]
) -> list[list[int]]:
    """Greedy tokens of each prompt from an in-process LLMEngine: the offline reference."""
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(model=str(model_path), device="cpu"))
    out: dict[str, list[int]] = {}
    for i, (prompt, n) in enumerate(zip(prompts, max_tokens, strict=True)):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0.0, max_tokens=n))
        out[str(i)] = []
    while engine.has_unfinished_requests():
        for delta in engine.step():
            out[delta.request_id].extend(delta.new_token_ids)
    return [out[str(i)] for i in range(len(prompts))]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def in_process_service(model_path, redis_url: str, model_name: str, **settings):
    """An EngineService on a real LLMEngine (CPU, two sequences at a time) and a real Redis,
    its threads not started: a test drives ``run_once`` itself."""
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.service import EngineService, ServiceSettings

    engine = LLMEngine(EngineConfig(model=str(model_path), device="cpu", max_num_seqs=2))
    prefix = settings.pop("prefix", f"svc{uuid.uuid4().hex[:6]}")
    return EngineService(
        engine,
        ServiceSettings(model_name=model_name, redis_url=redis_url, prefix=prefix, **settings),
    )
