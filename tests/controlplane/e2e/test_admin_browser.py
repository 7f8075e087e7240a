"""Acceptance 5: the admin in headless Chromium. Log in, create a tenant and a key, see the
secret once, use it, revoke it (the API refuses it within seconds), and watch the live engine
on the dashboard. Screenshots go to test-artifacts/controlplane/."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.browser import admin_sign_in, chromium_page
from tests.support.live_platform import ADMIN_PASSWORD, MODEL
from tests.support.shared_database import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = ROOT / "test-artifacts" / "controlplane"


@pytest.fixture
def page():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page(width=1400, height=900, missing=pytest.skip) as page:
        yield page


def _models_status(base_url: str, secret: str) -> int:
    response = httpx.get(
        f"{base_url}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=10
    )
    return response.status_code


def test_admin_key_lifecycle_and_dashboard(live_platform, page):
    base = live_platform.base_url
    admin_sign_in(page, base, ADMIN_PASSWORD)

    page.goto(f"{base}/admin/tenants/tenant/add/")
    page.fill("#id_name", "Browser Co")
    page.fill("#id_requests_per_minute", "100")
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist")
    assert "Browser Co" in page.inner_text("#result_list")

    page.goto(f"{base}/admin/tenants/apikey/add/")
    page.select_option("#id_tenant", label="Browser Co")
    page.fill("#id_name", "browser-key")
    page.click("input[name=_save]")
    secret = page.inner_text("#api-key-secret").strip()
    page.screenshot(path=str(ARTIFACTS / "1-key-created.png"), full_page=True)
    copy = page.locator("button[data-copy-target=api-key-secret]")
    copy.click()  # copied, or (no clipboard permission headless) the secret selected to copy
    page.wait_for_function(
        "() => document.querySelector('button[data-copy-target=api-key-secret]').textContent"
        " !== 'Copy'"
    )
    if copy.inner_text() != "Copied":
        assert page.evaluate("() => window.getSelection().toString().trim()") == secret
    assert secret.startswith("sk-")
    prefix = secret[:11]
    assert _models_status(base, secret) == 200
    completion = httpx.post(
        f"{base}/v1/completions",
        headers={"Authorization": f"Bearer {secret}"},
        json={"model": MODEL, "prompt": "Hello there", "max_tokens": 8},
        timeout=60,
    )
    assert completion.status_code == 200, completion.text
    assert completion.headers["x-ratelimit-limit-requests"] == "100"

    page.goto(f"{base}/admin/tenants/apikey/")
    assert secret not in page.content()  # shown once only
    row = page.locator("#result_list tr", has_text=prefix)
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "revoke")
    page.click("button[name=index]")
    page.click("#confirm-revoke")  # revoking asks first
    page.wait_for_selector("ul.messagelist")
    assert "Revoked 1 key(s)" in page.inner_text("ul.messagelist")
    page.screenshot(path=str(ARTIFACTS / "2-key-revoked.png"), full_page=True)
    deadline = time.monotonic() + 5
    while _models_status(base, secret) != 401:
        assert time.monotonic() < deadline, "the API still accepts the revoked key"
        time.sleep(0.2)

    page.goto(f"{base}/dashboard/")
    engine_row = page.wait_for_selector(f"#engines tr.engine:has-text('{MODEL}')", timeout=15000)
    cells = engine_row.inner_text()
    assert "serving" in cells and "%" in cells
    page.wait_for_selector("#dashboard[data-loaded=true]")
    data = page.evaluate("fetch('/dashboard/data.json').then(r => r.json())")
    assert sum(data["tokens_per_minute"]["series"]["Browser Co"]) > 0  # the usage charted
    page.wait_for_timeout(2500)  # a second poll, so the live throughput chart has a line
    page.screenshot(path=str(ARTIFACTS / "3-dashboard.png"), full_page=True)
