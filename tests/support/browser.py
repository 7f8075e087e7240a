"""Headless Chromium for the browser tests: Debian's ``chromium`` driven by Playwright."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def chromium_browser(*, missing: Callable[[str], object] = pytest.fail) -> Iterator:
    """Headless Chromium, launched through Playwright's sync API; ``missing`` (pytest.fail or
    pytest.skip) ends the test where chromium is not installed.

    A module whose tests all use pages can share one for its tests (module scope: each launch
    costs 1.7 s of CPU, the AVX2-only EPYC), each test taking a fresh context from it
    (``browser_page``). Not longer than a module: while Playwright's sync API is open, its
    event loop counts as running in this thread, so an asyncio test beside it would fail."""
    executable = shutil.which("chromium")
    if executable is None:
        missing("Debian's chromium package is required for browser tests (apt install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def browser_page(browser, *, width: int, height: int, **context_options) -> Iterator:
    """A fresh page (in a context of its own: no cookies or storage of another test) in a
    window of ``width`` x ``height`` CSS pixels; ``context_options`` go to Playwright's
    ``new_context`` (``is_mobile``, ``device_scale_factor``, ``permissions``)."""
    context = browser.new_context(viewport={"width": width, "height": height}, **context_options)
    try:
        yield context.new_page()
    finally:
        context.close()


@contextmanager
def chromium_page(
    *, width: int, height: int, missing: Callable[[str], object] = pytest.fail, **context_options
) -> Iterator:
    """A fresh page in a browser of its own (see ``browser_page``)."""
    with (
        chromium_browser(missing=missing) as browser,
        browser_page(browser, width=width, height=height, **context_options) as page,
    ):
        yield page


def admin_sign_in(page, base_url: str, password: str, username: str = "admin") -> None:
    """Sign ``page`` in to the admin at ``base_url`` through its login form, as a person does."""
    page.goto(f"{base_url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def playground_connect(page, base_url: str, api_key: str, model: str) -> None:
    """Open the playground at ``base_url``, connect with ``api_key`` as a person does, and
    choose ``model`` at temperature 0 (repeatable replies)."""
    page.goto(f"{base_url}/playground/")
    page.fill("#api-key", api_key)
    page.click("#connect")
    page.wait_for_selector('#status[data-state="connected"]')
    page.wait_for_function("document.querySelectorAll('#model option').length >= 1")
    page.select_option("#model", model)
    page.fill("#temperature", "0")
