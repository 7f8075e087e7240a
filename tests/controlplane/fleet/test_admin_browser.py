"""Issue 25's acceptance path in headless Chromium, in one browser session: sign in, register
the tiny checkpoint (a path on the server) from the Served models page, watch the real Celery
worker take it from registering to ready (the page reloads itself meanwhile), deploy it from
the Deployments page, and the official openai SDK gets an answer through Daphne once its
engine has loaded (within 10 s of its replica turning ready), with no process started or
restarted by hand: the worker registers, the node agent runs the engine. Screenshots go to
test-artifacts/controlplane/."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from playwright.sync_api import expect

from tests.support.browser import admin_sign_in, chromium_page
from tests.support.fleet_platform import ADMIN_PASSWORD, TINY_ENGINE_SETTINGS, fleet_platform
from tests.support.shared_database import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = ROOT / "test-artifacts" / "controlplane"
MODEL = "tiny-fleet"
# Generous: an engine loads in seconds alone, far slower on a busy 2-core CI machine.
LOAD_TIMEOUT_S = 300
# How long after its replica turns ready the deployment must answer.
ANSWER_AFTER_READY_S = 10


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    """Nothing registered: the first test registers the model from the admin, through the
    platform's Celery worker."""
    workdir = tmp_path_factory.mktemp("fleet-admin")
    with fleet_platform(workdir, models={}, admin=True, celery=True) as platform:
        yield platform


@pytest.fixture
def admin_page(platform):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page(width=1400, height=900, missing=pytest.fail) as page:
        admin_sign_in(page, platform.base_url, ADMIN_PASSWORD)
        yield page


def _answer_once_ready(platform) -> str:
    """Ask until the deployment answers: a 503 (no live engine yet) while it loads, never any
    other error. Fails if it takes longer than its load time plus ANSWER_AFTER_READY_S."""
    sdk = platform.sdk(timeout=60)
    started = time.monotonic()
    ready_at = None
    while True:
        if ready_at is None and any(r["state"] == "ready" for r in platform.replicas(MODEL)):
            ready_at = time.monotonic()
        try:
            completion = sdk.completions.create(model=MODEL, prompt="Hello", max_tokens=4)
            return completion.choices[0].text
        except openai.APIStatusError as refused:
            assert refused.status_code == 503, refused
        now = time.monotonic()
        assert now - started < LOAD_TIMEOUT_S, f"not ready: {platform.replicas(MODEL)}"
        assert ready_at is None or now - ready_at < ANSWER_AFTER_READY_S, (
            f"its replica was ready {now - ready_at:.1f}s ago, and the API still refuses"
        )
        time.sleep(0.5)


def _refused(platform) -> int | None:
    """The status the API refuses a completion with (None: it answered)."""
    try:
        platform.sdk().completions.create(model=MODEL, prompt="Hello", max_tokens=4)
    except openai.APIStatusError as refused:
        return refused.status_code
    return None


def test_register_and_deploy_from_the_admin_then_the_sdk_gets_an_answer(
    platform, admin_page, tiny_llama
):
    page = admin_page
    assert platform.query("SELECT name FROM deployments_servedmodel") == []
    page.goto(f"{platform.base_url}/admin/deployments/servedmodel/add/")
    page.fill("#id_name", MODEL)
    page.fill("#id_path", str(tiny_llama))
    page.screenshot(path=str(ARTIFACTS / "fleet-0-register-form.png"), full_page=True)
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist")
    row = page.locator("#result_list tr", has_text=MODEL)
    # The admin answers at once; the worker may or may not have finished by then.
    states = row.locator(".registration-registering, .registration-ready")
    assert states.count() == 1, row.inner_text()
    # The page reloads itself every 3 s while a model registers (expect retries meanwhile).
    expect(row.locator(".registration-ready")).to_have_count(1, timeout=120_000)
    expect(row).to_contain_text("LlamaForCausalLM")
    page.screenshot(path=str(ARTIFACTS / "fleet-0-model-ready.png"), full_page=True)
    assert platform.query("SELECT name, state FROM deployments_servedmodel") == [
        {"name": MODEL, "state": "ready"}
    ]
    # The worker, not the web process, registered it (its audit record says so).
    (finished,) = platform.audit("model.registration")
    assert finished["actor_label"] == "registration"
    assert finished["details"] == {"state": "ready", "reason": ""}

    page.goto(f"{platform.base_url}/admin/fleet/deployment/add/")
    page.fill("#id_name", MODEL)
    page.select_option("#id_served_model", label=MODEL)
    page.fill("#id_replicas", "1")
    for setting, value in TINY_ENGINE_SETTINGS.items():
        page.fill(f"#id_{setting}", value)
    page.screenshot(path=str(ARTIFACTS / "fleet-1-deploy-form.png"), full_page=True)
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist")
    assert MODEL in page.inner_text("#result_list")

    text = _answer_once_ready(platform)
    assert isinstance(text, str)  # a random-weight model: any text, but an answer

    # The agent marks the replica ready at its next beat after the engine's status record
    # appears, which the API reads directly: the page may lag the first answer by a beat.
    platform.wait(
        lambda: [r["state"] for r in platform.replicas(MODEL)] == ["ready"],
        what="the replica to be marked ready",
        timeout=30,
    )
    page.reload()
    row = page.locator("#result_list tr", has_text=MODEL)
    assert row.locator("td.field-ready").inner_text() == "1/1"
    page.screenshot(path=str(ARTIFACTS / "fleet-2-deployed.png"), full_page=True)
    row.locator("th a").click()
    page.wait_for_selector("#replicas_set-group")
    replicas = page.inner_text("#replicas_set-group")
    (replica,) = platform.replicas(MODEL)
    assert platform.node in replicas and replica["engine_id"] in replicas and "Ready" in replicas
    page.screenshot(path=str(ARTIFACTS / "fleet-3-replica.png"), full_page=True)

    page.goto(f"{platform.base_url}/admin/fleet/node/")
    node_row = page.locator("#result_list tr", has_text=platform.node)
    assert node_row.locator("td.field-live").inner_text() == "yes"
    assert f"{MODEL} (ready)" in node_row.locator("td.field-runs").inner_text()


def test_the_management_api_over_daphne_stops_and_starts_the_deployment(platform):
    """The same deployment through /api/ with a staff user's admin key: stop drains its
    engine (the API then refuses the model), start brings an engine back that answers."""
    secret = platform.manage(
        "create_api_key", "--staff-user", "admin", "--scope", "admin"
    ).splitlines()[-1]
    api = httpx.Client(
        base_url=f"{platform.base_url}/api", headers={"Authorization": f"Bearer {secret}"}
    )
    stopped = api.post(f"/deployments/{MODEL}/stop").json()
    assert (stopped["replicas"], stopped["stopped_replicas"]) == (0, 1)
    platform.wait(
        lambda: [r["state"] for r in platform.replicas(MODEL)] == ["stopped"],
        what="the stopped deployment's engine to drain",
    )
    platform.wait(lambda: _refused(platform) == 503, what="the API to refuse the stopped model")

    started = api.post(f"/deployments/{MODEL}/start").json()
    assert (started["replicas"], started["stopped_replicas"]) == (1, None)
    assert isinstance(_answer_once_ready(platform), str)
    nodes = api.get("/nodes").json()["data"]
    assert [(n["name"], n["live"]) for n in nodes] == [(platform.node, True)]
    platform.wait(  # as above: the agent's record may lag the first answer by a beat
        lambda: [r["state"] for r in api.get("/nodes").json()["data"][0]["replicas"]] == ["ready"],
        what="the node's replica to show ready",
        timeout=30,
    )
