"""Issue 25, item 5: registering a Hugging Face hub id in the admin, in headless Chromium,
against the live platform (Daphne) and a real Celery worker. The mirror holds the download,
so the test sees the admin answer with the model still registering and the worker's progress
on the page; once released, the page (which reloads itself while a model registers) shows it
ready. Screenshots go to test-artifacts/controlplane/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from controlplane.launcher.process_commands import celery_worker_command
from tests.support.browser import admin_sign_in, chromium_page
from tests.support.hub_mirror import HubMirror
from tests.support.live_platform import ADMIN_PASSWORD
from tests.support.processes import running, wait_for
from tests.support.shared_database import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = ROOT / "test-artifacts" / "controlplane"
TOKEN = "hf_browser_test"


@pytest.fixture
def hub(tiny_llama):
    with HubMirror({"org/tiny": tiny_llama}, token=TOKEN, hold_files=True) as mirror:
        yield mirror


@pytest.fixture
def celery_worker(live_platform, hub):
    """A worker as ``manage.py serve`` starts it, with the mirror as its hub."""
    env = {**live_platform.db.env, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    log = live_platform.workdir / "celery-registration.log"

    def ready() -> bool:
        return log.exists() and b"ready." in log.read_bytes()

    command = celery_worker_command(loglevel="INFO")
    with running(command, env, log, ready=ready, what="celery", timeout=90):
        yield log


@pytest.fixture
def page():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page(width=1400, height=900, missing=pytest.skip) as page:
        yield page


def test_register_a_hub_model_in_the_admin_and_watch_it_become_ready(
    live_platform, hub, celery_worker, page
):
    base = live_platform.base_url
    admin_sign_in(page, base, ADMIN_PASSWORD)

    page.goto(f"{base}/admin/deployments/servedmodel/add/")
    page.fill("#id_name", "hub-tiny")
    page.fill("#id_path", "org/tiny")
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist")
    # The admin answered; the worker has not finished (the mirror holds every file).
    row = page.locator("#result_list tr", has_text="hub-tiny")
    assert row.locator(".registration-registering").count() == 1, row.inner_text()

    # The worker, not the web process, downloads: the mirror sees its requests, and the list
    # shows the stage and the bytes it records.
    wait_for(lambda: hub.downloads_started() > 0, timeout=60, what="the worker's download")
    # (expect retries while the page reloads itself.)
    files = len(hub.files("org/tiny"))
    expect(row).to_contain_text(f"registering: downloading {files} files", timeout=30_000)
    expect(row).to_contain_text("MiB, 0%)")
    page.screenshot(path=str(ARTIFACTS / "model-registering.png"), full_page=True)

    hub.release()
    # The page reloads itself every 3 s while a model registers.
    expect(row.locator(".registration-ready")).to_have_count(1, timeout=120_000)
    expect(row).to_contain_text("LlamaForCausalLM")
    page.screenshot(path=str(ARTIFACTS / "model-ready.png"), full_page=True)
    page.goto(f"{base}/admin/deployments/servedmodel/?q=hub-tiny")
    page.click("#result_list a:text('hub-tiny')")
    # The source stays on the change page (expect waits out the navigation the click starts:
    # read at once, the page once held only its title, CI of 2026-11-25).
    expect(page.locator("#content")).to_contain_text("org/tiny")
