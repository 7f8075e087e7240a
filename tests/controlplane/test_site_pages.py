"""What a browser or an SDK meets on a platform run with the production defaults (DEBUG off):
a landing page at /, OpenAI's JSON 404 under /v1, Django's plain error pages elsewhere (never
the debug page listing every URL), and styled pages, their static files served by Daphne.

Daphne runs as the serve command runs it, with Redis unreachable so /ready fails."""

from __future__ import annotations

import httpx
import pytest

from controlplane.launcher.redis_server import free_port
from tests.controlplane.e2e import test_admin_browser as admin_browser
from tests.support.platform_services import platform_stack

pytestmark = pytest.mark.slow

ARTIFACTS = admin_browser.ARTIFACTS
page = admin_browser.page  # the fixture: a headless Chromium tab, as the admin's browser test uses

DEBUG_PAGE_MARKS = ("Traceback", "URLconf", "DEBUG = True", "Django tried these URL patterns")
PAGES = {
    "link-playground": "/playground/",
    "link-admin": "/admin/",
    "link-dashboard": "/dashboard/",
    "link-portal": "/portal/keys/",
    "link-api-docs": "/api/docs/",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("site-pages")
    with platform_stack(workdir, redis_prefix="site") as stack:
        env = {k: v for k, v in stack.env.items() if k != "DJANGO_DEBUG"}
        env["REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
        yield stack.start_daphne(timeout=90, env=env)


def _assert_no_debug_page(response: httpx.Response) -> None:
    for mark in DEBUG_PAGE_MARKS:
        assert mark not in response.text, f"{response.url} shows Django's debug page"


@pytest.mark.parametrize("path", ["/no-such-page", "/static/no-such-file.css", "/ready"])
def test_errors_show_no_debug_page(site, path):
    response = httpx.get(f"{site}{path}", timeout=10)
    assert response.status_code in {404, 500, 503}
    _assert_no_debug_page(response)


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_unknown_api_path_answers_openai_json_404(site, method):
    response = httpx.request(method, f"{site}/v1/nope", json={}, timeout=10)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": f"Invalid URL ({method} /v1/nope)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_landing_page_links_the_platform_pages(site):
    response = httpx.get(f"{site}/", timeout=10)
    assert response.status_code == 200
    for element_id, href in PAGES.items():
        assert f'id="{element_id}" href="{href}"' in response.text
    assert f'base_url="{site}/v1"' in response.text
    # The cards say which pages need a sign-in before a visitor meets a login form.
    dashboard_card = response.text.split('id="link-dashboard"', 1)[1].split("</a>", 1)[0]
    assert "sign-in required" in dashboard_card


@pytest.mark.django_db
def test_admin_view_site_link_leads_to_the_landing_page(admin_client):
    response = admin_client.get("/admin/")
    assert '<a href="/">View site</a>' in response.content.decode()


@pytest.mark.parametrize(
    "asset",
    [
        "landing/landing.css",
        "admin/css/base.css",
        "playground/playground.css",
        "portal/portal.css",
        "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
    ],
)
def test_static_files_are_served_with_debug_off(site, asset):
    response = httpx.get(f"{site}/static/{asset}", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/css")


def test_the_favicon_is_served_so_no_page_logs_a_404(site):
    response = httpx.get(f"{site}/favicon.ico", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] in {"image/vnd.microsoft.icon", "image/x-icon"}
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header


def _stylesheets_that_failed(page) -> list[str]:
    # After the load event, which waits for the stylesheets: a page whose element a test waited
    # for can still be fetching its CSS on a busy machine.
    page.wait_for_load_state("load")
    return page.evaluate(
        """() => [...document.querySelectorAll('link[rel=stylesheet]')]
                 .filter(link => !link.sheet || link.sheet.cssRules.length === 0)
                 .map(link => link.href)"""
    )


def _background(page, selector: str) -> str:
    return page.eval_on_selector(selector, "el => getComputedStyle(el).backgroundColor")


@pytest.mark.browser
def test_landing_page_in_chromium_is_styled_and_leads_to_each_page(site, page):
    page.goto(f"{site}/")
    page.screenshot(path=str(ARTIFACTS / "landing.png"), full_page=True)
    assert page.title() == "LLM platform"
    assert _stylesheets_that_failed(page) == []
    assert _background(page, "header") == "rgb(29, 35, 43)"  # the playground's header colour
    links = {
        page.get_attribute(f"#{element_id}", "href"): page.inner_text(f"#{element_id} strong")
        for element_id in PAGES
    }
    assert links == {
        "/playground/": "Playground",
        "/admin/": "Admin",
        "/dashboard/": "Dashboard",
        "/portal/keys/": "Tenant portal",
        "/api/docs/": "API docs",
    }

    page.click("#link-admin")  # not logged in: the admin's login page, in the admin's style
    page.wait_for_selector("#id_username")
    assert _stylesheets_that_failed(page) == []
    assert _background(page, "#header") not in {"rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"}

    page.goto(f"{site}/")
    page.click("#link-playground")
    page.wait_for_selector("#composer")
    assert _stylesheets_that_failed(page) == []


def test_ready_with_redis_away_is_503_json_with_retry_after(site):
    response = httpx.get(f"{site}/ready", timeout=30)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json() == {"status": "not ready", "reason": "redis unreachable"}
