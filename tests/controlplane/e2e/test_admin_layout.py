"""The admin in headless Chromium at 1280 px: every changelist, filled with rows of long names,
reasons and labels, fits the window (no sideways scrolling of the page or of the table); and
the admin and the playground link to each other. Screenshots go to test-artifacts/controlplane/."""

from __future__ import annotations

import pytest

from tests.support.browser import admin_sign_in, chromium_page
from tests.support.live_platform import ADMIN_PASSWORD, MODEL
from tests.support.shared_database import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = ROOT / "test-artifacts" / "controlplane"
WIDTH = 1280
CHANGELISTS = [
    "tenants/tenant",
    "tenants/apikey",
    "deployments/servedmodel",
    "adapters/adapter",
    "usage/usagerecord",
    "usage/dailyusage",
    "audit/auditevent",
    "fleet/deployment",
    "fleet/node",
]

# Three of everything: free text as long as the fields allow (names without spaces too), and
# counts at the top of what a busy platform would see.
_LONG_ROWS = f"""
import datetime
from django.utils import timezone
from controlplane.adapters.models import Adapter
from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.fleet.models import Deployment, Node, Replica
from controlplane.tenants.services import api_key_create, tenant_create
from controlplane.usage.models import DailyUsage, UsageRecord

base = ServedModel.objects.get(name={MODEL!r})
now = timezone.now()
words = "International Research and Development Division of Northwind Traders Europe"
for i in range(3):
    tenant = tenant_create(
        name=f"Layout {{i}} {{words}} {{words}}"[:200],
        requests_per_minute=100_000, tokens_per_minute=50_000_000,
        max_concurrent_requests=10_000, monthly_token_budget=900_000_000_000,
    )
    key = api_key_create(
        tenant=tenant, name=f"production-backend-service-{{i}}-" + "x" * 60,
        scopes=["chat.completions", "completions", "embeddings", "models", "tokenize", "websocket"],
        expires_at=now + datetime.timedelta(days=365),
    ).key
    model_name = f"layout-{{i}}-meta-llama/Llama-3.1-70B-Instruct-abliterated-" + "q" * 120
    ServedModel.objects.create(
        name=model_name, path="/srv/models/" + "deep/" * 40, architecture="Qwen3ForCausalLM",
        dtype="bfloat16", num_parameters=70_553_706_496, max_model_len=131072, is_active=False,
        # One of each registration state, with the longest stage line and reason the list shows.
        state=("ready", "registering", "failed")[i],
        stage="downloading 12 files into /srv/models/hub/" + "h" * 80,
        progress_done=70_000_000_000, progress_total=141_000_000_000,
        failure_reason="model.safetensors: tensor lm_head.weight has shape [1, 2], " * 10,
    )
    adapter_name = f"layout-{{i}}-customer-support/eu-west/summarizer-v2.3.1-" + "z" * 120
    Adapter.objects.create(
        name=adapter_name, base_model=base, path="/srv/adapters/x", state="failed",
        failure_reason=("adapter_model.safetensors: q_proj.lora_A has shape [8, 96], "
                        "expected [8, 64]; " * 10),
        rank=64,
    )
    for days in (1, 2):  # not within the dashboard's last hour
        UsageRecord.objects.create(
            created_at=now - datetime.timedelta(days=days), tenant=tenant, api_key=key,
            key_prefix=key.prefix, model=model_name, adapter=adapter_name,
            prompt_tokens=131_072, completion_tokens=32_768, cached_tokens=131_056,
            latency=1234.5678, status=200,
        )
        DailyUsage.objects.create(
            date=(now - datetime.timedelta(days=days)).date(), tenant=tenant,
            key_prefix=key.prefix, model=model_name, adapter=adapter_name,
            num_requests=40_000_000, num_errors=3_000_000, prompt_tokens=98_765_432_109,
            completion_tokens=12_345_678_901, cached_tokens=87_654_321_098,
        )
    node = Node.objects.create(
        name=f"layout-{{i}}-gpu-worker.eu-west-1.compute.internal-" + "n" * 120,
        num_cpus=192, memory_bytes=2_000_000_000_000,
        gpus=[{{"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85_899_345_920}}] * 8,
        labels={{"topology.kubernetes.io/zone": "eu-west-1a", "accelerator": "h100-" + "l" * 80}},
    )
    deployment = Deployment.objects.create(
        name=f"layout-{{i}}-deployment-" + "d" * 150, served_model=ServedModel.objects.get(
            name=model_name), replicas=1000, device="cuda",
    )
    for state in ("ready", "loading", "failed"):
        Replica.objects.create(
            deployment=deployment, node=node, state=state, engine_id="e" * 150,
            reason="engine exited with code 1: " + "CUDA out of memory " * 10, restarts=3,
        )
    AuditEvent.objects.create(
        actor_label="operations-automation-" + "y" * 150, action="adapter.validation_failed",
        target_type="adapters.adapter", target_id=str(i),
        target_repr=adapter_name + " on " + model_name,
    )
"""


@pytest.fixture
def admin_page(live_platform):
    """A page logged in to the admin as the superuser, in a 1280 px wide window."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page(width=WIDTH, height=900, missing=pytest.skip) as page:
        admin_sign_in(page, live_platform.base_url, ADMIN_PASSWORD)
        yield page


def _widths(page) -> dict:
    """The page's scroll width, and how far the result table overflows its own box."""
    return page.evaluate(
        """() => {
            const results = document.querySelector('#changelist-form .results');
            return {
                page: document.documentElement.scrollWidth,
                table: results.scrollWidth - results.clientWidth,
                rows: document.querySelectorAll('#result_list tbody tr').length,
            };
        }"""
    )


def test_every_changelist_fits_1280_px_with_long_rows(live_platform, admin_page):
    live_platform.db.manage("shell", "-c", _LONG_ROWS)
    overflowing = {}
    for changelist in CHANGELISTS:
        admin_page.goto(f"{live_platform.base_url}/admin/{changelist}/")
        widths = _widths(admin_page)
        assert widths["rows"] >= 3, (changelist, widths)
        if widths["page"] > WIDTH or widths["table"] > 0:
            overflowing[changelist] = widths
        admin_page.screenshot(path=str(ARTIFACTS / f"layout-{changelist.replace('/', '-')}.png"))
    assert overflowing == {}


def test_admin_and_playground_link_to_each_other(live_platform, admin_page):
    admin_page.click("#user-tools a#playground-link")
    admin_page.wait_for_url(f"{live_platform.base_url}/playground/")
    admin_page.click("a#admin-link")
    admin_page.wait_for_url(f"{live_platform.base_url}/admin/")
    assert admin_page.is_visible("#site-name")
