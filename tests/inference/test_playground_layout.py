"""The playground on a phone and with LoRA adapters: the WebSocket's model list names a tenant's
adapters with their base model; at 390 px wide the page never scrolls sideways, the send
button is on screen, and a chat with an adapter streams to its end."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from engine.tooling.random_lora import make_random_adapter
from tests.support.api_platform import MAX_MODEL_LEN
from tests.support.browser import chromium_page
from tests.support.processes import REPO

pytestmark = pytest.mark.slow

ADAPTER = "playground-support-lora"
PHONE = {"width": 390, "height": 844}
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="module")
def adapter(platform, tmp_path_factory) -> str:
    """A ready LoRA adapter on the chat model, granted to tenant "acme" (platform.api_key)."""
    adapter_dir = make_random_adapter(platform.checkpoint, tmp_path_factory.mktemp("lora"), rank=8)
    platform.register_adapter(adapter_dir, ADAPTER)
    platform.wait_adapter_served(ADAPTER)  # the playground lists adapters engines serve
    return ADAPTER


async def _listed_models(platform, api_key: str) -> list[dict]:
    url = platform.base_url.replace("http://", "ws://") + f"/v1/ws?api_key={api_key}"
    async with websockets.connect(url) as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "models"}))
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert message["type"] == "models"
    return message["data"]


async def test_models_message_lists_granted_adapters_with_their_base(platform, adapter):
    expected = {
        "id": adapter,
        "max_model_len": MAX_MODEL_LEN,
        "kind": "generation",
        "parent": platform.chat_model,
    }
    deadline = time.monotonic() + 10  # other processes see a catalog change within a second
    while expected not in (listed := await _listed_models(platform, platform.api_key)):
        assert time.monotonic() < deadline, listed
        await asyncio.sleep(0.2)
    ids = [m["id"] for m in listed]
    assert ids.index(platform.chat_model) < ids.index(adapter)  # bases first
    assert next(m for m in listed if m["id"] == platform.chat_model).get("parent") is None
    # Tenant "limited" was not granted the adapter: it is not listed.
    limited = await _listed_models(platform, platform.limited_key)
    assert [m["id"] for m in limited] == [platform.chat_model]


@pytest.fixture
def phone():
    with chromium_page(**PHONE, device_scale_factor=2, is_mobile=True) as page:
        yield page


def _assert_fits(page) -> None:
    """Nothing wider than the screen, and Send and Admin within it."""
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    for selector in ("#send", "#admin-link"):
        assert page.is_visible(selector), selector
        box = page.locator(selector).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (selector, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], (selector, box)


@pytest.mark.browser
def test_playground_fits_a_phone_and_chats_with_an_adapter(platform, adapter, phone):
    page = phone
    page.goto(f"{platform.base_url}/playground/")
    _assert_fits(page)
    page.fill("#api-key", platform.api_key)
    page.click("#connect")
    page.wait_for_selector('#status[data-state="connected"]')
    option = f'#model option[value="{adapter}"]'
    page.wait_for_selector(option, state="attached")
    assert page.inner_text(option) == f"{adapter} (LoRA on {platform.chat_model})"
    _assert_fits(page)

    page.select_option("#model", adapter)
    page.click("#more-settings summary")  # folded on a phone
    page.fill("#temperature", "0")
    page.fill("#max_tokens", "16")
    page.fill("#system", "You answer in one short line. " * 8)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.click("#more-settings summary")

    # A long word and a long answer must wrap inside the conversation, not widen the page.
    page.fill("#prompt", "supercalifragilistic" * 12)
    page.click("#send")
    answer = "#messages li.assistant:nth-child(2)"
    page.wait_for_selector(f"{answer}[data-finish]", timeout=30_000)
    assert page.get_attribute(answer, "data-finish") == "length", page.inner_text("#error")
    assert int(page.get_attribute(answer, "data-deltas")) > 1
    _assert_fits(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-390px.png"))
