"""The tenant portal and the interactive API docs in headless Chromium, on the served
platform (tests/inference/conftest.py): a tenant owner invited by the operator sets a
password, signs in, creates a key, uses it with the openai SDK, sees the tokens on the usage
page, and reaches nothing of another tenant, even by editing URLs; a person of the tenant
signs in through the company's OpenID Connect provider (a real one, django-oauth-toolkit, in
a process of its own); the landing page's API docs open Swagger UI, which lists every
endpoint and sends an authorised request."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from controlplane.launcher.process_commands import manage_command
from tests.support.browser import browser_page, chromium_browser
from tests.support.identity_provider import identity_provider
from tests.support.processes import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = REPO / "test-artifacts" / "portal"
OWNER = "owner@acme.test"
OWNER_PASSWORD = "owner password 2026"
SSO_PERSON = {"username": "dev", "email": "dev@acme.test", "password": "idp-pass-1"}
UNVERIFIED = {
    "username": "eve",
    "email": "eve@acme.test",
    "password": "idp-pass-2",
    "verified": False,
}

_REGISTER_PROVIDER = """
import json, sys
from controlplane.portal.models import IdentityProvider
from controlplane.tenants.models import ApiKey, Tenant
spec = json.loads(sys.argv[-1])
IdentityProvider.objects.create(
    name="Acme SSO", tenant=Tenant.objects.get(name="acme"), issuer=spec["issuer"],
    client_id=spec["client_id"], client_secret=spec["client_secret"], email_domains="acme.test",
)
limited = ApiKey.objects.get(prefix=spec["limited_prefix"])
print(json.dumps({"limited_key_id": limited.pk}))
"""


def _in_platform(platform, *args: str) -> str:
    """stdout of a command run against the platform's database, as another shell would."""
    done = subprocess.run(
        [*args], cwd=REPO, env=platform.env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sso(api_platform, tmp_path_factory):
    """The identity provider running, registered in the admin's place for tenant acme."""
    with identity_provider(
        tmp_path_factory.mktemp("idp"),
        redirect_uri=f"{api_platform.base_url}/portal/sso/callback/",
        users=[SSO_PERSON, UNVERIFIED],
    ) as provider:
        spec = {
            "issuer": provider.issuer,
            "client_id": provider.client_id,
            "client_secret": provider.client_secret,
            "limited_prefix": api_platform.limited_key[:11],
        }
        script = "import django; django.setup()\n" + _REGISTER_PROVIDER
        out = _in_platform(api_platform, sys.executable, "-c", script, json.dumps(spec))
        yield {"issuer": provider.issuer, **json.loads(out)}


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def page(browser):
    clipboard = ["clipboard-read", "clipboard-write"]
    with browser_page(browser, width=1280, height=900, permissions=clipboard) as page:
        yield page


def _sign_in_with_password(page, platform) -> None:
    base = platform.base_url
    invitation = _in_platform(
        platform, *manage_command("add_tenant_user", OWNER, "--tenant", "acme")
    )
    assert invitation.startswith("/portal/invitation/")
    page.goto(f"{base}{invitation}")
    page.fill("#id_new_password1", OWNER_PASSWORD)
    page.fill("#id_new_password2", OWNER_PASSWORD)
    page.click("#set-password")
    page.wait_for_selector("#password-sign-in")
    page.fill("#id_username", OWNER)
    page.fill("#id_password", OWNER_PASSWORD)
    page.click("#sign-in")
    page.wait_for_selector("#keys")
    assert page.inner_text("#signed-in-as") == f"{OWNER} · owner"


def _usage_row_tokens(page, base: str, prefix: str, expected: int, timeout: float) -> int:
    """The key's total tokens on the usage page, reloaded until they reach ``expected``."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(f"{base}/portal/usage/")
        row = page.locator("#usage-by-key tbody tr", has_text=prefix)
        tokens = int(row.locator("td.total-tokens").inner_text()) if row.count() else 0
        if tokens >= expected or time.monotonic() > deadline:
            return tokens
        time.sleep(0.5)


def test_owner_signs_in_makes_a_key_uses_it_and_sees_only_their_tenant(platform, sso, page):
    base = platform.base_url
    _sign_in_with_password(page, platform)

    page.fill("#id_name", "sdk-key")
    page.click("#create-key-button")
    secret = page.inner_text("#api-key-secret").strip()
    assert secret.startswith("sk-")
    snippet = page.inner_text("#sdk-snippet")
    assert f'OpenAI(base_url="{base}/v1", api_key="{secret}")' in snippet
    page.click("button[data-copy='#api-key-secret']")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    page.screenshot(path=str(ARTIFACTS / "1-key-created.png"), full_page=True)

    client = platform.sdk(api_key=secret)
    chat = client.chat.completions.create(
        model=platform.chat_model,
        messages=[{"role": "user", "content": "Hello from the portal"}],
        max_tokens=6,
        temperature=0,
    )
    own = client.responses.create(model=platform.chat_model, input="Hi", max_output_tokens=4)
    other = platform.sdk(api_key=platform.limited_key).responses.create(
        model=platform.chat_model, input="Private to limited", max_output_tokens=4
    )
    expected = chat.usage.total_tokens + own.usage.total_tokens
    prefix = secret[:11]
    assert _usage_row_tokens(page, base, prefix, expected, timeout=15) == expected
    usage_page = page.inner_text("main")
    assert platform.limited_key[:11] not in usage_page
    page.screenshot(path=str(ARTIFACTS / "2-usage.png"), full_page=True)

    page.goto(f"{base}/portal/responses/")
    assert own.id in page.inner_text("#responses")
    assert other.id not in page.inner_text("#responses")
    page.click(f"text={own.id}")
    assert page.inner_text("#response-input").count("Hi") >= 1

    page.goto(f"{base}/portal/keys/")
    keys_table = page.inner_text("#keys")
    assert prefix in keys_table and platform.limited_key[:11] not in keys_table
    # Editing the URL to another tenant's key or response: 404, and nothing revoked.
    tampered = (
        f"{base}/portal/keys/{sso['limited_key_id']}/revoke/",
        f"{base}/portal/responses/{other.id}/",
    )
    for url in tampered:
        assert page.goto(url).status == 404, url
    denied = page.request.post(tampered[0], headers={"Referer": base})
    assert denied.status in (403, 404)  # no CSRF token: refused whatever the tenant
    assert platform.sdk(api_key=platform.limited_key).models.list().data


def test_a_person_of_the_tenant_signs_in_through_the_identity_provider(api_platform, sso, browser):
    base = api_platform.base_url
    for person, arrives in ((SSO_PERSON, "#keys"), (UNVERIFIED, "#sso-error")):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{base}/portal/keys/")  # signed out: the sign-in page
        page.fill("#id_sso_email", person["email"])
        page.click("#sso-continue")
        page.wait_for_selector("#idp-username")  # the provider's own page
        assert page.url.startswith(sso["issuer"].removesuffix("/o") + "/login/")
        page.fill("#idp-username", person["username"])
        page.fill("#idp-password", person["password"])
        page.click("#idp-sign-in")
        page.wait_for_selector(arrives)
        if person is SSO_PERSON:
            assert page.url == f"{base}/portal/keys/"
            assert page.inner_text("#signed-in-as") == f"{person['email']} · member"
            page.screenshot(path=str(ARTIFACTS / "3-sso-signed-in.png"), full_page=True)
        else:
            assert "has not verified eve@acme.test" in page.inner_text("#sso-error")
            assert page.goto(f"{base}/portal/keys/").url.startswith(f"{base}/portal/login/")
        context.close()


def test_api_docs_list_every_endpoint_and_send_an_authorised_request(api_platform, page):
    base = api_platform.base_url
    foreign = []
    page.on("request", lambda r: None if r.url.startswith(base) else foreign.append(r.url))
    page.goto(f"{base}/")
    page.click("#link-api-docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert page.url == f"{base}/api/docs/"
    schema = httpx.get(f"{base}/api/schema/?format=json", timeout=30).json()
    shown = set(
        page.eval_on_selector_all(".opblock-summary-path", "els => els.map(e => e.dataset.path)")
    )
    assert shown == set(schema["paths"])
    assert page.get_attribute("#link-written-docs", "href") == "/docs/"

    page.click(".swagger-ui .btn.authorize")
    page.fill(".modal-ux input[type=text]", api_platform.api_key)
    page.click(".modal-ux .auth-btn-wrapper .authorize")
    page.click(".modal-ux .btn-done")
    models = page.locator(
        ".opblock-get", has=page.locator('.opblock-summary-path[data-path="/v1/models"]')
    )
    models.locator(".opblock-summary").click()
    models.locator(".try-out__btn").click()
    models.locator(".execute").click()
    status = models.locator(".live-responses-table tbody .response-col_status")
    status.wait_for(timeout=30_000)
    assert status.inner_text().strip() == "200"
    body = models.locator(".live-responses-table tbody .microlight").first.inner_text()
    assert api_platform.chat_model in body
    page.screenshot(path=str(ARTIFACTS / "4-api-docs.png"), full_page=False)
    assert foreign == []  # Swagger UI's files came from the platform, not a CDN

    page.click("#link-written-docs")
    page.click("#doc-pages a[href='/docs/api/']")
    assert page.locator("article.doc h1").count() == 1
