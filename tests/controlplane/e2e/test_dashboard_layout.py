"""The dashboard in headless Chromium at 1280 px and 390 px, with tenants and models of long
names: full names (nothing cut), one colour per tenant on every chart and in the tables (read
from the charts' own data), round axis ticks, and no sideways scrolling of the page.
Screenshots go to test-artifacts/controlplane/."""

from __future__ import annotations

import pytest

from tests.support.browser import admin_sign_in, browser_page, chromium_browser
from tests.support.live_platform import ADMIN_PASSWORD, MODEL
from tests.support.shared_database import ROOT

pytestmark = [pytest.mark.browser]

ARTIFACTS = ROOT / "test-artifacts" / "controlplane"
TENANTS = ["Northwind Traders Europe Research Division", "Contoso Pharmaceuticals International"]
LONG_MODEL = "dashboard-meta-llama/Llama-3.1-70B-Instruct-abliterated-long-name"

_USAGE = f"""
import datetime
from django.utils import timezone
from controlplane.deployments.models import ServedModel
from controlplane.tenants.services import api_key_create, tenant_create
from controlplane.usage.models import DailyUsage, UsageRecord

now = timezone.now()
ServedModel.objects.create(
    name={LONG_MODEL!r}, path="/srv/models/x", architecture="LlamaForCausalLM", is_active=False,
)
for index, name in enumerate({TENANTS!r}):
    tenant = tenant_create(name=name)
    key = api_key_create(tenant=tenant, name="dash").key
    for minutes, days in ((2, 0), (5, 0), (0, 1), (0, 3)):
        UsageRecord.objects.create(
            created_at=now - datetime.timedelta(days=days, minutes=minutes), tenant=tenant,
            api_key=key, key_prefix=key.prefix, model={MODEL!r}, prompt_tokens=100 * (index + 1),
            completion_tokens=20, cached_tokens=0, latency=0.2, status=200,
        )
    for days in (1, 3):  # what the usage flush aggregates the day's records into
        DailyUsage.objects.create(
            date=(now - datetime.timedelta(days=days)).date(), tenant=tenant,
            key_prefix=key.prefix, model={MODEL!r}, num_requests=1,
            prompt_tokens=100 * (index + 1), completion_tokens=20, cached_tokens=0,
        )
"""


@pytest.fixture(scope="module")
def dashboard_data(live_platform):
    live_platform.db.manage("shell", "-c", _USAGE)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return live_platform


def _open_dashboard(page, base_url: str) -> None:
    admin_sign_in(page, base_url, ADMIN_PASSWORD)
    page.goto(f"{base_url}/dashboard/")
    page.wait_for_selector('#dashboard[data-loaded="true"]')
    page.wait_for_function(
        "Object.keys(PlatformCharts.drawn).length === document.querySelectorAll('canvas').length"
    )


def _colours(page) -> dict:
    """Per chart, the colour of each series it drew; and the legends' and tables' colours."""
    return page.evaluate(
        """() => ({
            charts: Object.fromEntries(Object.entries(PlatformCharts.drawn)
                .map(([id, chart]) => [id, chart.colors])),
            legends: [...document.querySelectorAll('ul.legend li')]
                .map(li => [li.dataset.series, li.dataset.color]),
        })"""
    )


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


@pytest.mark.parametrize("width", [1280, 390])
def test_dashboard_shows_full_names_and_one_colour_per_tenant(browser, dashboard_data, width):
    with browser_page(browser, width=width, height=900) as page:
        _open_dashboard(page, dashboard_data.base_url)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{width}px.png"), full_page=True)

        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # Every registered model is listed by its full name, with what serves it.
        states = {
            row.get_attribute("data-model"): row.get_attribute("data-state")
            for row in page.query_selector_all("#models tr.model")
        }
        assert states[MODEL] == "serving" and states[LONG_MODEL] == "inactive"
        cell = page.locator(f'#models tr.model[data-model="{LONG_MODEL}"] td').first
        assert cell.inner_text() == LONG_MODEL
        assert cell.evaluate("el => el.scrollWidth <= el.clientWidth")
        # Engines are named by where they run, not by their id alone.
        where = page.inner_text("#engines tr.engine td.engine-where")
        assert "pid" in where
        # Every engine cell sits under its heading, the replicas' hand-overs among them.
        headings = page.locator("#engines thead th").all_inner_texts()
        assert "handed over" in [h.lower() for h in headings]
        assert page.locator("#engines tr.engine").first.locator("td").count() == len(headings)

        colours = _colours(page)
        minutes = colours["charts"]["chart-tenant-minutes"]
        days = colours["charts"]["chart-tenant-days"]
        assert set(TENANTS) <= set(minutes) and set(TENANTS) <= set(days)
        for tenant in TENANTS:
            assert minutes[tenant] == days[tenant]
        assert minutes[TENANTS[0]] != minutes[TENANTS[1]]
        legend = {}
        for series, colour in colours["legends"]:
            assert legend.setdefault(series, colour) == colour, series
        for tenant in TENANTS:  # the legend holds the full name, not a cut one
            assert page.locator(f'ul.legend li[title="{tenant}"]').first.inner_text() == tenant


def test_chart_axes_use_round_ticks(browser, dashboard_data):
    with browser_page(browser, width=800, height=600) as page:
        _open_dashboard(page, dashboard_data.base_url)
        ticks = page.evaluate(
            """() => [1, 0.8, 7, 1234].map(max => {
                const t = PlatformCharts.ticks(max, 4);
                const values = [];
                for (let v = 0; v <= t.top + t.step / 2; v += t.step) values.push(v.toFixed(t.decimals));
                return values;
            })"""
        )
    assert ticks == [
        ["0.0", "0.5", "1.0"],
        ["0.0", "0.2", "0.4", "0.6", "0.8"],
        ["0", "2", "4", "6", "8"],
        ["0", "500", "1000", "1500"],
    ]
