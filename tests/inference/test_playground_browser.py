"""The playground in headless Chromium: connect with a key, chat, watch tokens stream, stop."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.browser import chromium_page, playground_connect
from tests.support.processes import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture
def page():
    with chromium_page(width=1200, height=800) as page:
        yield page


def _delta_count(page, selector: str) -> int:
    return int(page.get_attribute(selector, "data-deltas") or 0)


@contextmanager
def _engine_frozen(stack, model: str):
    """The model's engine stopped (SIGSTOP) for the block, then resumed: a stream it serves
    stays open, whatever the engine's speed (the tiny model can finish a 1,500-token answer
    in a second, or end it early, between two clicks of a test)."""
    engine = next(
        c for c in stack.supervisor.children if c.name == f"engine-{model}" and c.running()
    )
    os.kill(engine.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(engine.pid, signal.SIGCONT)


def test_chat_streams_and_stops(platform, platform_env, page):
    external = []
    page.on(
        "request",
        lambda r: (
            external.append(r.url)
            if not r.url.startswith((platform.base_url, "ws://127.0.0.1"))
            else None
        ),
    )
    playground_connect(page, platform.base_url, platform.api_key, platform.chat_model)

    # A short answer: it streams in several pieces and finishes on its own.
    page.fill("#max_tokens", "12")
    page.fill("#prompt", "Hello there")
    page.click("#send")
    first = "#messages li.assistant:nth-child(2)"
    page.wait_for_selector(f"{first}[data-finish]", timeout=30_000)
    assert page.get_attribute(first, "data-finish") == "length"
    assert _delta_count(page, first) > 1
    assert page.inner_text("#messages li.user:nth-child(1) .content") == "Hello there"

    # A long answer: tokens arrive over time (seen at two moments), then Stop cancels it.
    # Greedy, so the answer is the same every run (sampled, it sometimes ended in a few dozen
    # tokens); the engine is frozen before the click, so the stream cannot end first.
    page.fill("#temperature", "0")
    page.fill("#max_tokens", "1500")
    page.fill("#prompt", "Tell me more")
    page.click("#send")
    second = "#messages li.assistant:nth-child(4)"
    page.wait_for_function(
        "Number(document.querySelectorAll('#messages li.assistant')[1].dataset.deltas) >= 3"
    )
    seen_early = _delta_count(page, second)
    page.wait_for_function(
        f"Number(document.querySelectorAll('#messages li.assistant')[1].dataset.deltas) > "
        f"{seen_early}"
    )
    with _engine_frozen(platform_env[0], platform.chat_model):
        assert page.get_attribute(second, "data-finish") is None, "the answer ended before Stop"
        assert page.is_enabled("#stop-button")
        page.click("#stop-button")
        page.wait_for_selector(f'{second}[data-finish="cancelled"]', timeout=15_000)
    stopped_at = _delta_count(page, second)
    assert stopped_at < 1500
    page.wait_for_timeout(500)
    assert _delta_count(page, second) == stopped_at  # nothing more after the stop
    assert page.is_enabled("#send")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground.png"), full_page=True)
    assert external == []  # every asset came from the project itself
    assert platform.wait_engine_idle()["num_running"] == 0
    assert Path(ARTIFACTS / "playground.png").stat().st_size > 0
