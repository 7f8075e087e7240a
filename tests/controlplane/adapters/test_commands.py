"""register_adapter and grant_adapter: the command-line contract of DESIGN.md section 13."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.adapters import selectors
from controlplane.adapters.models import Adapter
from engine.lora.validation import adapter_checksum
from engine.tooling.random_lora import make_random_adapter

pytestmark = pytest.mark.django_db


def test_register_with_tenants_validates_and_grants(base_model, adapter_dir, make_tenant, capsys):
    tenant = make_tenant("Acme")
    call_command(
        "register_adapter",
        str(adapter_dir),
        "--name",
        "acme-bot",
        "--base",
        "tiny-llama",
        "--tenant",
        "Acme",
    )
    out = capsys.readouterr().out
    assert (
        "adapter acme-bot is ready on tiny-llama (rank 8, q_proj, v_proj; granted to acme)" in out
    )
    assert [r.name for r in selectors.adapters_visible_to(tenant_id=tenant.pk)] == ["acme-bot"]


def test_register_reports_a_failed_validation(base_model, wrong_shape_dir):
    with pytest.raises(CommandError, match=r"failed validation: layer 0 q_proj\.lora_A has shape"):
        call_command(
            "register_adapter", str(wrong_shape_dir), "--name", "w", "--base", "tiny-llama"
        )
    assert Adapter.objects.get(name="w").state == Adapter.State.FAILED


def test_register_refuses_unknown_tenants_and_bases(base_model, adapter_dir):
    with pytest.raises(CommandError, match="unknown tenant 'ghost'"):
        call_command(
            "register_adapter",
            str(adapter_dir),
            "--name",
            "a",
            "--base",
            "tiny-llama",
            "--tenant",
            "ghost",
        )
    with pytest.raises(CommandError, match="unknown base model 'nope'"):
        call_command("register_adapter", str(adapter_dir), "--name", "a", "--base", "nope")
    assert not Adapter.objects.exists()


def test_grant_and_revoke(base_model, adapter_dir, make_tenant, capsys):
    tenant = make_tenant("Beta")
    call_command("register_adapter", str(adapter_dir), "--name", "b", "--base", "tiny-llama")
    call_command("grant_adapter", "b", "--tenant", "beta")
    assert "adapter b granted to beta" in capsys.readouterr().out
    assert selectors.tenant_adapter_names(tenant_id=tenant.pk) == {"b"}
    call_command("grant_adapter", "b", "--tenant", "Beta", "--revoke")
    assert selectors.tenant_adapter_names(tenant_id=tenant.pk) == frozenset()
    with pytest.raises(CommandError, match="unknown adapter 'zzz'"):
        call_command("grant_adapter", "zzz", "--tenant", "beta")


def test_registering_again_updates_the_adapter(
    base_model, adapter_dir, tiny_llama, tmp_path, capsys
):
    call_command("register_adapter", str(adapter_dir), "--name", "c", "--base", "tiny-llama")
    first = Adapter.objects.get(name="c")
    newer = make_random_adapter(tiny_llama, tmp_path / "newer", rank=4, seed=9)
    call_command("register_adapter", str(newer), "--name", "c", "--base", "tiny-llama")
    out = capsys.readouterr().out
    assert f"updated c to the files in {newer.resolve()}" in out
    assert "adapter c is ready on tiny-llama (rank 4" in out
    again = Adapter.objects.get(name="c")
    assert again.pk == first.pk and again.checksum == adapter_checksum(newer) != first.checksum
