"""Mid-stream failover: SIGKILL the engine that is generating, the client never notices.

Two engine processes serve the tiny llama behind a Daphne of their own (own Redis prefix and
database copy, so no other test's engine can pick the request up or be killed). A greedy
request runs undisturbed once; then the same request runs again and, once its first tokens
have arrived, the engine whose ``started`` hash holds it is killed with SIGKILL. The survivor
reaps it, the API re-submits prompt + delivered tokens, and the client (the official openai
SDK) sees no error, and the very same tokens as the undisturbed run.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
import redis

from controlplane.launcher.process_commands import engine_command
from tests.support.api_platform import CHAT_MODEL
from tests.support.fresh_daphne import fresh_daphne, isolated_env
from tests.support.processes import running

# Engines start, die and are replaced, and a failover waits for the status TTL.
pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.timeout(600)]

PROMPT = "The failover test asks the model to go on and on about"
# The tiny model writes a token a millisecond or so: the engine must still be generating when
# the client has read KILL_AFTER tokens. With 200 and 30, a client held back by a loaded
# machine (four test workers and another process on two cores) read its 30th token after the
# engine had written its 200th in all three attempts.
MAX_TOKENS = 600
KILL_AFTER = 10  # tokens the client has received when the engine dies


@dataclass
class Stack:
    base_url: str
    api_key: str
    redis: redis.Redis
    prefix: str

    def sdk(self):
        import openai

        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0, timeout=120
        )

    def statuses(self) -> dict[str, dict]:
        keys = self.redis.keys(f"{self.prefix}:status:{CHAT_MODEL}:*")
        records = [json.loads(r) for r in self.redis.mget(keys) if r] if keys else []
        return {r["engine_id"]: r for r in records}

    def running_engines(self) -> list[str]:
        """Engines with a status whose process still runs: a killed engine's status lives on
        for its TTL (5 s), and counting it left a later test with one engine, which it then
        killed, with no survivor to move to."""
        return [e for e, s in self.statuses().items() if _process_runs(s["pid"])]

    def kill_engine_running_a_request(self) -> str | None:
        """SIGKILL the engine whose ``started`` hash holds a request: its id. None when no
        engine holds one within 10 s (the request ended before it was looked for: a client
        slowed down by a loaded machine can read its 30th token after a tiny model wrote its
        200th). The engine is frozen (SIGSTOP) before its hash is read again, so the engine
        killed is certain to die holding the request, not one that finished in between; the
        hash is read again only after a pause, as the write that ends a request may have left
        the engine just before the freeze and still be on its way to Redis (the likeliest
        reading of a CI run on 2026-11-27 in which the request ended while the "killed"
        engine's status was still alive)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for key in self.redis.keys(f"{self.prefix}:started:{CHAT_MODEL}:*"):
                if not self.redis.hlen(key):
                    continue
                engine_id = key.decode().rsplit(":", 1)[1]
                pid = self.statuses()[engine_id]["pid"]
                os.kill(pid, signal.SIGSTOP)
                time.sleep(IN_FLIGHT_S)
                if self.redis.hlen(key):
                    os.kill(pid, signal.SIGKILL)
                    return engine_id
                os.kill(pid, signal.SIGCONT)  # it finished just before the freeze
            time.sleep(0.02)
        return None


# A run whose request ended before its engine could be killed shows nothing and is run again.
ATTEMPTS = 3
# Long enough for a write the engine sent just before it was frozen to reach Redis.
IN_FLIGHT_S = 0.5


def _process_runs(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie its parent (this test) has not reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(scope="module")
def stack(api_platform, tmp_path_factory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("failover")
    env = isolated_env(api_platform, workdir)
    prefix = env["PLATFORM_REDIS_PREFIX"]
    client = redis.Redis.from_url(api_platform.redis_url)
    with ExitStack() as stack:
        for i in range(2):
            command = engine_command(
                api_platform.checkpoint,
                CHAT_MODEL,
                redis_url=api_platform.redis_url,
                device="cpu",
                max_num_seqs=8,
            )
            stack.enter_context(
                running(
                    command,
                    env,
                    workdir / f"engine-{i}.log",
                    ready=lambda n=i + 1: len(client.keys(f"{prefix}:status:{CHAT_MODEL}:*")) >= n,
                    what=f"engine {i}",
                    timeout=120,
                )
            )
        daphne = stack.enter_context(fresh_daphne(env, workdir))
        yield Stack(daphne.base_url, api_platform.api_key, client, prefix)
    client.close()


def _engines_back_to_two(stack: Stack, api_platform, tmp_path, exits: ExitStack) -> None:
    """After kills, start replacements so the next test again has a survivor to move to.

    Which engine a test kills depends on which one picked its request up, and an earlier
    test's replacement stops when that test ends: so none, one or two may be missing."""
    env = {**api_platform.env, "PLATFORM_REDIS_PREFIX": stack.prefix}
    command = engine_command(
        api_platform.checkpoint, CHAT_MODEL, redis_url=api_platform.redis_url, device="cpu"
    )
    while (have := len(stack.running_engines())) < 2:
        exits.enter_context(
            running(
                command,
                env,
                tmp_path / f"replacement-engine-{have}.log",
                ready=lambda have=have: len(stack.running_engines()) > have,
                what="replacement engine",
                timeout=120,
            )
        )


@pytest.fixture
def two_engines(stack, api_platform, tmp_path) -> Iterator[Stack]:
    with ExitStack() as exits:
        _engines_back_to_two(stack, api_platform, tmp_path, exits)
        yield stack


def _request(**extra) -> dict:
    return {
        "model": CHAT_MODEL,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "logprobs": 1,
        "extra_body": {"ignore_eos": True},
        **extra,
    }


def _undisturbed(stack: Stack):
    done = stack.sdk().completions.create(**_request())
    assert len(done.choices[0].logprobs.tokens) == MAX_TOKENS
    return done


def _generated(stack: Stack) -> dict[str, int]:
    return {e: s["generation_tokens_total"] for e, s in stack.statuses().items()}


def test_greedy_stream_survives_sigkill_of_its_engine(two_engines):
    stack = two_engines
    undisturbed = _undisturbed(stack)
    for _ in range(ATTEMPTS):
        time.sleep(1.5)  # one status refresh
        before = _generated(stack)

        stream = stack.sdk().completions.create(
            **_request(stream=True, stream_options={"include_usage": True})
        )
        got_tokens: list[str] = []
        got_text = ""
        finish_reason = usage = None
        killed = tried = None
        longest_pause, last = 0.0, time.monotonic()
        for chunk in stream:
            now = time.monotonic()
            longest_pause, last = max(longest_pause, now - last), now
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                got_text += choice.text
                if choice.logprobs is not None:
                    got_tokens.extend(choice.logprobs.tokens)
                finish_reason = choice.finish_reason or finish_reason
            if not tried and len(got_tokens) >= KILL_AFTER:
                tried, killed = True, stack.kill_engine_running_a_request()
        if killed is not None:
            break
    assert killed is not None
    assert finish_reason == "length"
    # Status TTL (5 s) + the reaper's grace + one tick: the stream resumes within seconds.
    print(f"failover pause: {longest_pause:.1f}s")
    assert longest_pause < 20
    assert got_tokens == undisturbed.choices[0].logprobs.tokens
    assert got_text == undisturbed.choices[0].text
    # The survivor really took over, from where the dead engine stopped: it generated the
    # rest of this request's tokens, not all of them.
    time.sleep(1.5)  # one status refresh
    after = _generated(stack)
    survivors = [e for e in after if e != killed]
    assert len(survivors) == 1
    grown = after[survivors[0]] - before.get(survivors[0], 0)
    assert 0 < grown <= MAX_TOKENS - KILL_AFTER
    # Billed once for the original prompt, and for every token produced.
    assert usage.prompt_tokens == undisturbed.usage.prompt_tokens
    assert usage.completion_tokens == MAX_TOKENS


def test_greedy_request_without_stream_survives_sigkill(two_engines):
    stack = two_engines
    undisturbed = _undisturbed(stack)
    sdk = stack.sdk()
    result: dict = {}

    def call() -> None:
        try:
            result["done"] = sdk.completions.create(**_request())
        except Exception as exc:  # reported by the assertion below
            result["error"] = exc

    for _ in range(ATTEMPTS):
        result.clear()
        thread = threading.Thread(target=call)
        thread.start()
        killed = stack.kill_engine_running_a_request()
        thread.join(timeout=120)
        if killed is not None:
            break
    assert killed is not None
    assert "error" not in result, result.get("error")
    done = result["done"]
    assert killed not in stack.statuses()
    assert done.choices[0].logprobs.tokens == undisturbed.choices[0].logprobs.tokens
    assert done.choices[0].text == undisturbed.choices[0].text
    assert done.choices[0].finish_reason == "length"
    assert done.usage.prompt_tokens == undisturbed.usage.prompt_tokens
    assert done.usage.completion_tokens == MAX_TOKENS


def test_seeded_samples_of_n_survive_sigkill_each_where_it_stopped(two_engines):
    """n=2, sampled with a seed: each sample resumes alone (seed + index, its own output so
    far) and both end exactly as in the undisturbed run."""
    stack = two_engines
    request = _request(n=2, temperature=0.9, seed=1234)
    undisturbed = stack.sdk().completions.create(**request)
    expected = {c.index: c.logprobs.tokens for c in undisturbed.choices}
    assert expected[0] != expected[1]  # two samples, not one copied
    for _ in range(ATTEMPTS):
        time.sleep(1.5)  # one status refresh
        before = _generated(stack)
        got: dict[int, list[str]] = {0: [], 1: []}
        killed = tried = None
        for chunk in stack.sdk().completions.create(**request, stream=True):
            for choice in chunk.choices:
                if choice.logprobs is not None:
                    got[choice.index].extend(choice.logprobs.tokens)
            if not tried and len(got[0]) + len(got[1]) >= KILL_AFTER:
                tried, killed = True, stack.kill_engine_running_a_request()
        if killed is not None:
            break
    assert killed is not None
    assert got == expected
    # The survivor generated only what was left of the two samples.
    time.sleep(1.5)
    after = _generated(stack)
    (survivor,) = [e for e in after if e != killed]
    assert 0 < after[survivor] - before.get(survivor, 0) <= 2 * MAX_TOKENS - KILL_AFTER
