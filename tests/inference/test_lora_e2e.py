"""Issue 7, acceptance 3, across processes and with no restart: an operator uploads an adapter
in the admin (over HTTP), a Celery worker validates it, the operator grants it to tenant
"acme", and acme calls it with the OpenAI SDK; tenant "limited" gets 404 for the same name;
an adapter of the wrong shape ends in ``failed`` with a readable reason."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest

from controlplane.launcher.process_commands import celery_worker_command, manage_command
from engine.tooling.random_lora import make_random_adapter
from tests.inference.conftest import REPO, _spawn, _stop

pytestmark = pytest.mark.slow

PROMPT = [5, 17, 99, 230, 41, 7, 300, 12]
MAX_TOKENS = 12
ADMIN = ("lora-admin", "lora-admin-password-1")


def _manage_shell(platform, code: str) -> str:
    done = subprocess.run(
        manage_command("shell", "-c", code),
        cwd=REPO,
        env=platform.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.fixture(scope="module")
def celery_worker(platform):
    log = Path(platform.env["PLATFORM_VAR_DIR"]).parent / "celery.log"
    worker = _spawn(celery_worker_command(concurrency=1, loglevel="INFO"), platform.env, log)
    yield worker
    _stop(worker)


@pytest.fixture(scope="module")
def admin(platform):
    """An httpx client logged in to the admin as a superuser."""
    _manage_shell(
        platform,
        "from django.contrib.auth import get_user_model; U = get_user_model()\n"
        f"U.objects.filter(username={ADMIN[0]!r}).exists() or "
        f"U.objects.create_superuser({ADMIN[0]!r}, 'a@example.com', {ADMIN[1]!r})",
    )
    client = httpx.Client(base_url=platform.base_url, timeout=30)
    page = client.get("/admin/login/")
    response = client.post(
        "/admin/login/?next=/admin/",
        data={
            "username": ADMIN[0],
            "password": ADMIN[1],
            "next": "/admin/",
            "csrfmiddlewaretoken": _csrf(page.text),
        },
    )
    assert response.status_code == 302, response.text[:2000]
    yield client
    client.close()


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def _upload(admin, name: str, adapter_dir: Path, base_pk: int) -> None:
    page = admin.get("/admin/adapters/adapter/add/")
    files = {
        "config_file": ("adapter_config.json", (adapter_dir / "adapter_config.json").read_bytes()),
        "weights_file": (
            "adapter_model.safetensors",
            (adapter_dir / "adapter_model.safetensors").read_bytes(),
        ),
    }
    response = admin.post(
        "/admin/adapters/adapter/add/",
        data={"name": name, "base_model": str(base_pk), "csrfmiddlewaretoken": _csrf(page.text)},
        files=files,
    )
    assert response.status_code == 302, response.text[:3000]


def _state(platform, name: str) -> dict:
    return json.loads(
        _manage_shell(
            platform,
            "import json; from controlplane.adapters.models import Adapter\n"
            f"a = Adapter.objects.get(name={name!r})\n"
            "print(json.dumps({'pk': a.pk, 'state': a.state, 'reason': a.failure_reason}))",
        )
    )


def _wait_state(platform, name: str, states=("ready", "failed"), timeout=60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = _state(platform, name)
        if state["state"] in states or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _ids(platform) -> tuple[int, int]:
    out = _manage_shell(
        platform,
        "from controlplane.deployments.models import ServedModel\n"
        "from controlplane.tenants.models import Tenant\n"
        f"print(ServedModel.objects.get(name={platform.chat_model!r}).pk, "
        "Tenant.objects.get(name='acme').pk)",
    )
    base_pk, tenant_pk = out.split()
    return int(base_pk), int(tenant_pk)


def _offline(checkpoint, adapter_dir):
    from engine.llm import LLM
    from engine.lora.request import LoRARequest
    from engine.sampling_params import SamplingParams

    llm = LLM(str(checkpoint), max_loras=1, max_lora_rank=8)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    prompt = {"prompt_token_ids": PROMPT}
    tuned = llm.generate(prompt, params, lora_request=LoRARequest("x", 1, str(adapter_dir)))
    base = llm.generate(prompt, params)
    return tuned[0].outputs[0].text, base[0].outputs[0].text


def test_admin_upload_validate_grant_then_sdk_call(platform, celery_worker, admin, tmp_path):
    adapter_dir = make_random_adapter(platform.checkpoint, tmp_path / "sql", rank=8, b_std=0.2)
    base_pk, acme_pk = _ids(platform)
    _upload(admin, "sql-bot", adapter_dir, base_pk)
    assert _wait_state(platform, "sql-bot")["state"] == "ready"

    change = f"/admin/adapters/adapter/{_state(platform, 'sql-bot')['pk']}/change/"
    page = admin.get(change)
    response = admin.post(
        change, data={"tenants": [str(acme_pk)], "csrfmiddlewaretoken": _csrf(page.text)}
    )
    assert response.status_code == 302, response.text[:3000]

    expected, base_text = _offline(platform.checkpoint, adapter_dir)
    assert expected != base_text
    client = platform.sdk()
    deadline = time.monotonic() + 30
    while True:  # the engine loads the adapter when the control message reaches it
        try:
            reply = client.completions.create(
                model="sql-bot",
                prompt=PROMPT,
                max_tokens=MAX_TOKENS,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            break
        except openai.APIStatusError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert reply.model == "sql-bot"
    assert reply.usage.completion_tokens == MAX_TOKENS
    assert reply.choices[0].text == expected
    listed = {m.id: m for m in client.models.list().data}
    assert listed["sql-bot"].parent == platform.chat_model

    other = openai.OpenAI(
        base_url=f"{platform.base_url}/v1", api_key=platform.limited_key, max_retries=0
    )
    with pytest.raises(openai.NotFoundError):
        other.completions.create(model="sql-bot", prompt=PROMPT, max_tokens=4)
    assert "sql-bot" not in {m.id for m in other.models.list().data}


def test_wrong_shape_upload_fails_with_its_reason(platform, celery_worker, admin, tmp_path):
    wide_base = tmp_path / "wide-base"
    wide_base.mkdir()
    config = json.loads((Path(platform.checkpoint) / "config.json").read_text())
    config.update(hidden_size=96, head_dim=24)
    (wide_base / "config.json").write_text(json.dumps(config))
    wrong = make_random_adapter(wide_base, tmp_path / "wide", rank=8, targets=("q_proj",))
    base_pk, _ = _ids(platform)
    _upload(admin, "too-wide", wrong, base_pk)
    state = _wait_state(platform, "too-wide")
    assert state["state"] == "failed"
    assert "q_proj.lora_A has shape [8, 96], expected [8, 64]" in state["reason"]
    listing = admin.get("/admin/adapters/adapter/").text
    assert "failed" in listing
