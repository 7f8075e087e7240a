"""Declaring shared prefixes: validation, versions, audit, the catalog every API process reads,
the public salt, the admin and ``manage.py declare_shared_prefix``."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

from controlplane.audit.models import AuditEvent
from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments.models import ServedModel
from controlplane.shared_prefixes.models import SharedPrefix
from controlplane.shared_prefixes.services import (
    shared_prefix_create,
    shared_prefix_new_version,
    shared_prefix_set_models,
    shared_prefix_update,
)

pytestmark = pytest.mark.django_db

SYSTEM = [{"role": "system", "content": "You are the support bot of Example Corp."}]


@pytest.fixture
def models(redis_client):
    for name in ("tiny-llama", "other"):
        ServedModel.objects.create(name=name, path="/nowhere", architecture="LlamaForCausalLM")


def test_a_declared_prefix_reaches_the_catalog_and_leaves_it_when_deactivated(models):
    prefix = shared_prefix_create(name="support", messages=SYSTEM, model_names=["tiny-llama"])
    (record,) = catalog_snapshot().shared_prefixes
    assert (record.label, record.messages, record.models) == (
        "support v1",
        SYSTEM,
        frozenset({"tiny-llama"}),
    )
    assert record.applies_to("tiny-llama") and not record.applies_to("other")
    shared_prefix_update(prefix=prefix, is_active=False)
    assert catalog_snapshot().shared_prefixes == ()
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "details"))
    assert actions == [
        ("shared_prefix.create", {"kind": "chat", "models": ["tiny-llama"], "is_active": True}),
        ("shared_prefix.update", {"changed": ["is_active"], "is_active": False}),
    ]


def test_no_model_selected_means_every_model(models):
    shared_prefix_create(name="everywhere", kind="text", text="Answer briefly.")
    (record,) = catalog_snapshot().shared_prefixes
    assert record.applies_to("tiny-llama") and record.applies_to("other")


def test_the_public_salt_is_per_prefix_version_model_and_content(models):
    v1 = shared_prefix_create(name="support", messages=SYSTEM)
    v2 = shared_prefix_new_version(prefix=v1)
    assert (v2.version, v2.is_active, v2.messages) == (2, False, SYSTEM)
    shared_prefix_update(prefix=v2, is_active=True)
    r2, r1 = catalog_snapshot().shared_prefixes  # newest version first
    salt = r1.public_salt("tiny-llama")
    assert salt.startswith("shared:") and salt == r1.public_salt("tiny-llama")
    assert len({salt, r1.public_salt("other"), r2.public_salt("tiny-llama")}) == 3
    shared_prefix_update(prefix=v1, messages=[{"role": "system", "content": "Changed."}])
    changed = catalog_snapshot().shared_prefixes[1]
    assert changed.public_salt("tiny-llama") != salt


@pytest.mark.parametrize(
    "content",
    [
        {"kind": "chat", "messages": []},
        {"kind": "chat", "messages": [{"role": "wizard", "content": "x"}]},
        {"kind": "chat", "messages": [{"role": "system", "content": 3}]},
        {"kind": "chat", "messages": SYSTEM, "tools": [{"type": "function"}]},
        {"kind": "chat", "messages": SYSTEM, "tools": ["search"]},
        {"kind": "text", "text": ""},
        {"kind": "text", "text": "x", "messages": SYSTEM},
        {"kind": "poem", "text": "x"},
    ],
)
def test_malformed_prefixes_are_refused(models, content):
    with pytest.raises(ValidationError):
        shared_prefix_create(name="bad", **content)
    assert not SharedPrefix.objects.exists()


def test_unknown_models_and_a_taken_version_are_refused(models):
    with pytest.raises(ValidationError, match="unknown models: nope"):
        shared_prefix_create(name="p", messages=SYSTEM, model_names=["nope"])
    shared_prefix_create(name="p", messages=SYSTEM)
    with pytest.raises(ValidationError):
        shared_prefix_create(name="p", messages=SYSTEM, version=1)
    assert shared_prefix_create(name="p", messages=SYSTEM).version == 2


def test_setting_models_is_audited_and_reaches_the_catalog(models):
    prefix = shared_prefix_create(name="p", messages=SYSTEM, model_names=["tiny-llama"])
    shared_prefix_set_models(prefix=prefix, model_names=["other"])
    assert catalog_snapshot().shared_prefixes[0].models == frozenset({"other"})
    assert AuditEvent.objects.filter(action="shared_prefix.set_models").count() == 1


def test_the_command_declares_the_next_version(models, tmp_path, capsys):
    system = tmp_path / "system.txt"
    system.write_text("You are terse.")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "search"}}]))
    args = ["support", "--system-file", str(system), "--tools-file", str(tools)]
    call_command("declare_shared_prefix", *args, "--model", "tiny-llama")
    call_command("declare_shared_prefix", *args, "--inactive")
    assert "declared shared prefix support v2 (inactive)" in capsys.readouterr().out
    first, second = SharedPrefix.objects.order_by("version")
    assert first.messages == [{"role": "system", "content": "You are terse."}]
    assert first.tools[0]["function"]["name"] == "search"
    assert [m.name for m in first.served_models.all()] == ["tiny-llama"]
    assert not second.is_active and not second.served_models.exists()


def test_the_admin_declares_edits_and_versions_through_the_services(models, staff_client):
    llama = ServedModel.objects.get(name="tiny-llama")
    response = staff_client.post(
        reverse("admin:shared_prefixes_sharedprefix_add"),
        {
            "name": "support",
            "version": "1",
            "kind": "chat",
            "messages": json.dumps(SYSTEM),
            "tools": "[]",
            "is_active": "on",
            "served_models": [llama.pk],
        },
    )
    assert response.status_code == 302, response.content[:2000]
    prefix = SharedPrefix.objects.get()
    assert catalog_snapshot().shared_prefixes[0].label == "support v1"
    changelist = reverse("admin:shared_prefixes_sharedprefix_changelist")
    page = staff_client.get(changelist).content.decode()
    assert "support" in page and "tiny-llama" in page
    staff_client.post(changelist, {"action": "new_version", "_selected_action": [prefix.pk]})
    staff_client.post(changelist, {"action": "deactivate", "_selected_action": [prefix.pk]})
    assert catalog_snapshot().shared_prefixes == ()
    assert list(SharedPrefix.objects.values_list("version", "is_active")) == [
        (2, False),
        (1, False),
    ]
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor_label"))
    assert actions == [
        ("shared_prefix.create", "root"),
        ("shared_prefix.create", "root"),
        ("shared_prefix.update", "root"),
    ]
