"""The playground's conversation features in headless Chromium.

Rendering, regenerate, edit, failed turns, comparison and "view code" run against a scripted
WebSocket (Playwright answers /v1/ws in the browser, so a reply can hold a code block or a
<script> tag and the test can read every request body the page sends); reload, reconnect, a
bad key and the reply's speed run against the real platform."""

from __future__ import annotations

import json

import pytest

from tests.support.browser import browser_page, chromium_browser, playground_connect

pytestmark = [pytest.mark.browser]

MODELS = [
    {"id": "alpha", "object": "model", "kind": "chat"},
    {"id": "beta", "object": "model", "kind": "chat"},
]
CODE_REPLY = (
    "Here:\n\n```python\nprint('hi')\n```\n\nDone **now** <script>window.pwned = 1</script>"
)


class ScriptedSocket:
    """The server side of /v1/ws: signs in any key, lists two models, and answers each chat
    request with the reply ``reply_for`` gives its last user message (None: an error)."""

    def __init__(self, page):
        self.requests: list[dict] = []
        self.sockets: list = []  # every connection the page opened, oldest first
        page.route_web_socket("**/v1/ws", self._connected)

    def reply_for(self, prompt: str) -> str | None:
        if prompt == "fail":
            return None
        return CODE_REPLY if prompt == "code please" else f"echo: {prompt}"

    def _connected(self, ws) -> None:
        self.sockets.append(ws)
        ws.on_message(lambda message: self._on_message(ws, json.loads(message)))

    def _send(self, ws, message: dict) -> None:
        ws.send(json.dumps(message))

    def _on_message(self, ws, message: dict) -> None:
        kind = message.get("type")
        if kind == "auth":
            self._send(ws, {"type": "auth.ok", "tenant": "scripted"})
        elif kind == "models":
            self._send(ws, {"type": "models", "data": MODELS})
        elif kind == "chat.completions":
            self.requests.append(message["body"])
            gen_id, body = message["id"], message["body"]
            reply = self.reply_for(body["messages"][-1]["content"])
            if reply is None:
                error = {"message": "the engine failed", "type": "server_error", "code": None}
                self._send(ws, {"type": "error", "id": gen_id, "status": 500, "error": error})
                return
            words = reply.split(" ")
            for index, word in enumerate(words):
                piece = word if index == 0 else " " + word
                usage = {
                    "prompt_tokens": 5,
                    "completion_tokens": index + 1,
                    "total_tokens": 6 + index,
                }
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}}], "usage": usage}
                self._send(ws, {"type": "chunk", "id": gen_id, "data": chunk})
            finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            self._send(ws, {"type": "chunk", "id": gen_id, "data": finish})
            self._send(ws, {"type": "done", "id": gen_id})


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def page(browser):
    with browser_page(browser, width=1200, height=800) as page:
        yield page


def _open_scripted(page, base_url: str) -> ScriptedSocket:
    socket = ScriptedSocket(page)
    page.goto(f"{base_url}/playground/")
    page.fill("#api-key", "sk-scripted")
    page.click("#connect")
    page.wait_for_selector('#status[data-state="connected"]')
    page.wait_for_selector('#model option[value="alpha"]', state="attached")
    return socket


def _ask(page, text: str, replies: int) -> None:
    page.fill("#prompt", text)
    page.click("#send")
    page.wait_for_function(
        f"document.querySelectorAll('#messages li.assistant[data-finish]').length >= {replies}"
    )


def test_replies_render_markdown_and_model_html_stays_text(api_platform, page):
    _open_scripted(page, api_platform.base_url)
    _ask(page, "code please", 1)
    reply = page.locator("#messages li.assistant").first
    assert reply.locator(".code-block pre code.language-python").inner_text() == "print('hi')"
    assert reply.locator("strong").inner_text() == "now"
    assert "<script>window.pwned = 1</script>" in reply.locator(".content").inner_text()
    assert reply.locator("script").count() == 0
    assert page.evaluate("window.pwned === undefined")
    assert reply.locator(".code-block button.copy-code").count() == 1


def test_failed_turns_are_not_sent_again_and_regenerate_and_edit_resend(api_platform, page):
    socket = _open_scripted(page, api_platform.base_url)
    _ask(page, "first", 1)
    _ask(page, "fail", 2)
    failed = page.locator('#messages li.assistant[data-turn="1"]')
    assert failed.get_attribute("data-finish") == "error"
    assert "the engine failed" in page.inner_text("#error")
    assert page.inner_text("#usage") == "failed: no usage reported"
    _ask(page, "third", 3)
    sent = [m["content"] for m in socket.requests[-1]["messages"]]
    assert sent == ["first", "echo: first", "third"]  # the failed turn is left out

    page.click('#messages li.assistant[data-turn="2"] button.regenerate')
    page.wait_for_function("document.querySelectorAll('#messages li.streaming').length === 0")
    assert len(socket.requests) == 4 and socket.requests[-1] == socket.requests[-2]

    page.click('#messages li.user[data-turn="0"] button.edit')
    page.fill("#messages li.user textarea.editor", "changed")
    page.click("#messages li.user button.edit-send")
    page.wait_for_function(
        "document.querySelector('#messages li.assistant[data-turn=\"0\"][data-finish]')"
    )
    assert [m["content"] for m in socket.requests[-1]["messages"]] == ["changed"]
    assert page.locator("#messages li.user").count() == 1  # later turns were dropped
    assert "echo: changed" in page.inner_text("#messages li.assistant")


def test_compare_two_models_side_by_side_and_view_code(api_platform, page):
    socket = _open_scripted(page, api_platform.base_url)
    page.select_option("#model", "alpha")
    page.select_option("#compare", "beta")
    page.fill("#temperature", "0.3")
    _ask(page, "hello", 1)
    assert sorted(r["model"] for r in socket.requests) == ["alpha", "beta"]
    row = page.locator("#messages li.assistant.compare")
    assert row.locator(".reply").count() == 2
    assert row.locator(".lane-model").all_inner_texts() == ["alpha", "beta"]

    page.fill("#prompt", "next question")
    page.click("#view-code")
    snippet = page.inner_text("#code-snippet")
    assert f'base_url="{api_platform.base_url}/v1"' in snippet
    assert 'model="alpha"' in snippet and "temperature=0.3" in snippet
    assert '"content": "next question"' in snippet and '"content": "echo: hello"' in snippet
    compile(snippet, "snippet.py", "exec")  # it is Python


def test_reload_keeps_the_conversation_and_reconnects_and_shows_speed(platform, page):
    playground_connect(page, platform.base_url, platform.api_key, platform.chat_model)
    page.fill("#max_tokens", "12")
    page.fill("#prompt", "Hello there")
    page.click("#send")
    reply = "#messages li.assistant .reply"
    page.wait_for_selector(f"{reply}[data-finish]", timeout=30_000)
    assert int(page.get_attribute(reply, "data-tokens")) == 12
    assert float(page.get_attribute(reply, "data-tokens-per-second")) > 0
    assert "tok/s" in page.inner_text(f"{reply} .meta")
    assert "TTFT" in page.inner_text(f"{reply} .meta")
    text = page.inner_text(f"{reply} .content")

    page.reload()
    page.wait_for_selector('#status[data-state="connected"]')  # no Connect click
    assert page.inner_text("#messages li.user .content") == "Hello there"
    assert page.inner_text(f"{reply} .content") == text
    assert page.input_value("#max_tokens") == "12"


def test_a_bad_key_or_no_key_says_so_instead_of_connecting_forever(api_platform, page):
    page.goto(f"{api_platform.base_url}/playground/")
    page.wait_for_selector('#status[data-state="error"]', timeout=10_000)
    assert "No API key" in page.inner_text("#error")  # no key, no admin session

    page.fill("#api-key", "sk-not-a-real-key")
    page.click("#connect")
    # The platform answers a refused key at once (well under 2 s on a quiet machine); the
    # bound here is generous because the suite's machine is busy.
    page.wait_for_selector('#status[data-state="error"]', timeout=10_000)
    assert "The API key was refused" in page.inner_text("#error")


def test_a_dropped_socket_reconnects_by_itself(api_platform, page):
    socket = _open_scripted(page, api_platform.base_url)
    before = len(socket.sockets)
    socket.sockets[-1].close(code=1011, reason="server restarting")
    page.wait_for_selector('#status[data-state="disconnected"]')
    assert "reconnecting" in page.inner_text("#status")
    page.wait_for_selector('#status[data-state="connected"]', timeout=10_000)
    assert len(socket.sockets) == before + 1  # a new connection, with no click
    _ask(page, "after the drop", 1)
    assert socket.requests[-1]["messages"][-1]["content"] == "after the drop"
