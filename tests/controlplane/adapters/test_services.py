"""Adapter services: register or upload, validate, grant, delete; what engines and tenants see."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from controlplane.adapters import engine_sync, selectors, services
from controlplane.adapters.models import Adapter
from controlplane.adapters.tasks import validate_adapter
from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from engine import protocol
from engine.lora.validation import adapter_checksum
from engine.tooling.random_lora import make_random_adapter

pytestmark = pytest.mark.django_db


def _control_messages(redis_client, model):
    entries = redis_client.xrange(protocol.Keys().control(model))
    return [protocol.decode_control(fields[protocol.FIELD]) for _, fields in entries]


def test_register_validate_publish_and_route(
    base_model, adapter_dir, make_tenant, redis_client, django_capture_on_commit_callbacks
):
    tenant_a, tenant_b = make_tenant("A"), make_tenant("B")
    with django_capture_on_commit_callbacks() as queued:
        adapter = services.adapter_register(
            path=adapter_dir, name="support-bot", base="tiny-llama", tenants=[tenant_a]
        )
    assert adapter.state == Adapter.State.UPLOADED
    assert queued, "validation must be queued once the registration commits"
    assert selectors.adapter_route_for(tenant_id=tenant_a.pk, name="support-bot") is None

    with django_capture_on_commit_callbacks(execute=True):
        assert validate_adapter(adapter.pk) == "ready"
    adapter.refresh_from_db()
    assert adapter.state == Adapter.State.READY and adapter.failure_reason == ""
    assert adapter.checksum == adapter_checksum(adapter_dir)
    assert (adapter.rank, adapter.lora_alpha) == (8, 16.0)
    assert adapter.target_modules == ["q_proj", "v_proj"]

    route = selectors.adapter_route_for(tenant_id=tenant_a.pk, name="support-bot")
    assert (route.base_model, route.checksum, route.path) == (
        "tiny-llama",
        adapter.checksum,
        str(Path(adapter_dir).resolve()),
    )
    assert selectors.adapter_route_for(tenant_id=tenant_b.pk, name="support-bot") is None
    assert [r.name for r in selectors.adapters_visible_to(tenant_id=tenant_b.pk)] == []
    assert selectors.tenant_adapter_names(tenant_id=tenant_a.pk) == {"support-bot"}

    # The engines of the base model learn about it without a restart.
    published = engine_sync.published_adapters(model="tiny-llama")
    assert published["support-bot"].checksum == adapter.checksum
    (message,) = _control_messages(redis_client, "tiny-llama")
    assert isinstance(message, protocol.LoadAdapter)
    assert message.adapter.name == "support-bot" and message.adapter.path == route.path


def test_wrong_shape_fails_with_a_readable_reason(base_model, wrong_shape_dir, make_tenant):
    tenant = make_tenant("A")
    adapter = services.adapter_register(
        path=wrong_shape_dir, name="wide", base=base_model, tenants=[tenant], enqueue=False
    )
    services.adapter_validate(adapter_id=adapter.pk)
    adapter.refresh_from_db()
    assert adapter.state == Adapter.State.FAILED
    assert adapter.failure_reason == (
        "layer 0 q_proj.lora_A has shape [8, 96], expected [8, 64] "
        "(rank 8, base q_proj is 64 -> 64)"
    )
    assert adapter.checksum == ""
    assert selectors.adapter_route_for(tenant_id=tenant.pk, name="wide") is None


def test_rank_above_the_engines_limit_fails(settings, base_model, adapter_dir):
    settings.ENGINE_MAX_LORA_RANK = 4
    adapter = services.adapter_register(
        path=adapter_dir, name="big", base=base_model, enqueue=False
    )
    adapter = services.adapter_validate(adapter_id=adapter.pk)
    assert adapter.state == Adapter.State.FAILED
    assert "adapter rank 8 exceeds the engine's max_lora_rank 4" in adapter.failure_reason


def test_files_changed_after_ready_fail_on_revalidation_and_are_withdrawn(
    base_model, adapter_dir, redis_client, django_capture_on_commit_callbacks
):
    adapter = services.adapter_register(path=adapter_dir, name="ad", base=base_model, enqueue=False)
    with django_capture_on_commit_callbacks(execute=True):
        services.adapter_validate(adapter_id=adapter.pk)
        (Path(adapter_dir) / "adapter_model.safetensors").write_bytes(b"garbage!")
        adapter = services.adapter_validate(adapter_id=adapter.pk)
    assert adapter.state == Adapter.State.FAILED
    assert "not a safetensors file" in adapter.failure_reason
    assert "ad" not in engine_sync.published_adapters(model="tiny-llama")
    kinds = [type(m).__name__ for m in _control_messages(redis_client, "tiny-llama")]
    assert kinds == ["LoadAdapter", "UnloadAdapter"]


def test_upload_files_and_zip_store_copies(base_model, adapter_dir, settings):
    files = [
        SimpleUploadedFile(name, (Path(adapter_dir) / name).read_bytes())
        for name in services.ADAPTER_FILES
    ]
    uploaded = services.adapter_upload(name="up", base=base_model, files=files, enqueue=False)
    assert uploaded.stored_by_platform
    assert Path(uploaded.path).parent == Path(settings.ADAPTER_UPLOAD_DIR)
    assert adapter_checksum(uploaded.path) == adapter_checksum(adapter_dir)

    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        for name in services.ADAPTER_FILES:
            zf.write(Path(adapter_dir) / name, f"my-adapter/{name}")
        zf.writestr("my-adapter/README.md", "ignored")
        zf.writestr("../../escape/adapter_config.json.bak", "never written")
    archive.seek(0)
    zipped = services.adapter_upload(name="zipped", base=base_model, archive=archive, enqueue=False)
    assert sorted(p.name for p in Path(zipped.path).iterdir()) == sorted(services.ADAPTER_FILES)
    assert services.adapter_validate(adapter_id=zipped.pk).state == Adapter.State.READY


def test_bad_uploads_are_refused_and_leave_no_files(base_model, adapter_dir, settings):
    only_config = [
        SimpleUploadedFile(
            "adapter_config.json", (Path(adapter_dir) / "adapter_config.json").read_bytes()
        )
    ]
    with pytest.raises(ValidationError, match=r"lacks adapter_model\.safetensors"):
        services.adapter_upload(name="half", base=base_model, files=only_config, enqueue=False)
    with pytest.raises(ValidationError, match="not a readable zip"):
        services.adapter_upload(
            name="nozip", base=base_model, archive=io.BytesIO(b"plain"), enqueue=False
        )
    with pytest.raises(ValidationError, match=r"unexpected file 'model\.bin'"):
        services.adapter_upload(
            name="pickle", base=base_model, files=[SimpleUploadedFile("model.bin", b"x")]
        )
    settings.ADAPTER_MAX_BYTES = 100
    big = [
        SimpleUploadedFile(name, (Path(adapter_dir) / name).read_bytes())
        for name in services.ADAPTER_FILES
    ]
    with pytest.raises(ValidationError, match="larger than 100 bytes"):
        services.adapter_upload(name="big", base=base_model, files=big, enqueue=False)
    upload_root = Path(settings.ADAPTER_UPLOAD_DIR)
    assert not upload_root.exists() or list(upload_root.iterdir()) == []
    assert not Adapter.objects.exists()


@pytest.mark.parametrize(
    ("name", "base", "message"),
    [
        ("tiny-llama", "tiny-llama", "already a served model's name"),
        ("bad name!", "tiny-llama", "Use letters, digits"),
        ("ok", "no-such-model", "unknown base model 'no-such-model'"),
    ],
)
def test_register_refuses_bad_names_and_bases(base_model, adapter_dir, name, base, message):
    with pytest.raises(ValidationError, match=message):
        services.adapter_register(path=adapter_dir, name=name, base=base, enqueue=False)


def test_register_refuses_missing_paths(base_model, tmp_path):
    with pytest.raises(ValidationError, match="is not a directory"):
        services.adapter_register(path=tmp_path / "nope", name="two", base=base_model)


def test_registering_a_name_again_updates_the_adapter(
    base_model, adapter_dir, tiny_llama, tmp_path, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = services.adapter_register(
            path=adapter_dir, name="one", base=base_model, enqueue=False
        )
        first = services.adapter_validate(adapter_id=first.pk)
    newer = make_random_adapter(tiny_llama, tmp_path / "newer", rank=4, seed=7)
    with django_capture_on_commit_callbacks(execute=True):
        again = services.adapter_register(path=newer, name="one", base="tiny-llama", enqueue=False)
        assert again.pk == first.pk and again.state == Adapter.State.UPLOADED
        # Not routed until validated again; the engines keep the old version meanwhile.
        assert selectors.adapter_route_for(tenant_id=0, name="one") is None
        assert engine_sync.published_adapters(model="tiny-llama")["one"].checksum == first.checksum
        again = services.adapter_validate(adapter_id=again.pk)
    assert Adapter.objects.count() == 1
    assert again.state == Adapter.State.READY and again.rank == 4
    assert again.checksum == adapter_checksum(newer) != first.checksum
    published = engine_sync.published_adapters(model="tiny-llama")["one"]
    assert (published.checksum, published.path) == (again.checksum, str(newer.resolve()))
    loads = _control_messages(redis_client, "tiny-llama")
    assert [m.adapter.checksum for m in loads] == [first.checksum, again.checksum]
    actions = AuditEvent.objects.order_by("id").values_list("action", flat=True)
    assert "adapter.update" in list(actions)


def test_a_re_registration_that_fails_validation_is_withdrawn(
    base_model, adapter_dir, wrong_shape_dir, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        adapter = services.adapter_register(
            path=adapter_dir, name="one", base=base_model, enqueue=False
        )
        services.adapter_validate(adapter_id=adapter.pk)
        services.adapter_register(path=wrong_shape_dir, name="one", base=base_model, enqueue=False)
        assert services.adapter_validate(adapter_id=adapter.pk).state == Adapter.State.FAILED
    assert "one" not in engine_sync.published_adapters(model="tiny-llama")
    kinds = [type(m).__name__ for m in _control_messages(redis_client, "tiny-llama")]
    assert kinds == ["LoadAdapter", "UnloadAdapter"]


def test_re_uploading_replaces_the_stored_files_and_a_base_change_is_refused(
    base_model, adapter_dir, tiny_llama, tmp_path, django_capture_on_commit_callbacks
):
    def files(directory):
        return [
            SimpleUploadedFile(name, (Path(directory) / name).read_bytes())
            for name in services.ADAPTER_FILES
        ]

    first = services.adapter_upload(
        name="up", base=base_model, files=files(adapter_dir), enqueue=False
    )
    newer = make_random_adapter(tiny_llama, tmp_path / "newer", rank=4, seed=3)
    with django_capture_on_commit_callbacks(execute=True):
        again = services.adapter_upload(
            name="up", base=base_model, files=files(newer), enqueue=False
        )
    assert again.pk == first.pk and again.path != first.path
    assert not Path(first.path).exists(), "the old upload's files are removed"
    assert adapter_checksum(again.path) == adapter_checksum(newer)

    other = ServedModel.objects.create(name="other", path=str(tiny_llama), architecture="x")
    with pytest.raises(ValidationError, match="registered on base model 'tiny-llama'"):
        services.adapter_register(path=newer, name="up", base=other, enqueue=False)


def test_grant_revoke_and_delete(
    base_model, adapter_dir, make_tenant, redis_client, django_capture_on_commit_callbacks
):
    tenant = make_tenant("A")
    adapter = services.adapter_register(path=adapter_dir, name="ad", base=base_model, enqueue=False)
    services.adapter_validate(adapter_id=adapter.pk)
    services.adapter_grant(adapter=adapter, tenant=tenant)
    services.adapter_grant(adapter=adapter, tenant=tenant)  # idempotent
    assert [r.name for r in selectors.adapters_visible_to(tenant_id=tenant.pk)] == ["ad"]
    services.adapter_revoke_grant(adapter=adapter, tenant=tenant)
    assert selectors.adapters_visible_to(tenant_id=tenant.pk) == []

    with django_capture_on_commit_callbacks(execute=True):
        services.adapter_delete(adapter=adapter)
    assert not Adapter.objects.exists()
    assert Path(adapter_dir).is_dir(), "a registered path belongs to the operator"
    (message,) = _control_messages(redis_client, "tiny-llama")
    assert message == protocol.UnloadAdapter(name="ad")
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions[-4:] == [
        "adapter.grant",
        "adapter.grant",
        "adapter.revoke_grant",
        "adapter.delete",
    ]


def test_deleting_an_upload_removes_its_files(
    base_model, adapter_dir, django_capture_on_commit_callbacks
):
    files = [
        SimpleUploadedFile(name, (Path(adapter_dir) / name).read_bytes())
        for name in services.ADAPTER_FILES
    ]
    adapter = services.adapter_upload(name="up", base=base_model, files=files, enqueue=False)
    with django_capture_on_commit_callbacks(execute=True):
        services.adapter_delete(adapter=adapter)
    assert not Path(adapter.path).exists()


def test_validation_of_a_deleted_adapter_is_a_no_op(base_model, adapter_dir):
    adapter = services.adapter_register(
        path=adapter_dir, name="gone", base=base_model, enqueue=False
    )
    pk = adapter.pk
    services.adapter_delete(adapter=adapter)
    assert validate_adapter(pk) is None


def test_the_adapters_app_never_loads_torch_in_api_processes():
    """Daphne serves the admin and the API: importing the app must not pull in torch."""
    import subprocess
    import sys

    code = (
        "import sys, django\n"
        "django.setup()\n"
        "import controlplane.adapters.admin, controlplane.adapters.selectors\n"
        "import controlplane.adapters.services, controlplane.adapters.tasks\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "controlplane.settings", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
