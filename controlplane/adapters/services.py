"""Writes on LoRA adapters. The admin, the management commands and the Celery task call these.

Registering or uploading creates an adapter in state ``uploaded`` (or, under an existing
name, points that adapter at the new files) and queues its validation; validation
(``adapter_validate``, run by the Celery worker) moves it through ``validating`` to ``ready``
or ``failed`` and, once ready, announces it to the base model's engines. Every write
bumps the catalog epoch (controlplane/catalog/cache.py), so every API process sees new,
granted, revoked, re-validated and deleted adapters within a second.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlplane.adapters import engine_sync
from controlplane.adapters.inspection import adapter_inspect
from controlplane.adapters.models import Adapter, adapter_name_validator
from controlplane.adapters.uploads import ADAPTER_FILES, store_upload
from controlplane.audit.services import audit_record
from controlplane.common.redis_epoch import catalog_epoch_bump
from controlplane.deployments.models import ServedModel
from controlplane.tenants.models import Tenant

logger = logging.getLogger(__name__)

__all__ = [
    "ADAPTER_FILES",
    "adapter_delete",
    "adapter_grant",
    "adapter_register",
    "adapter_registration_check",
    "adapter_request_validation",
    "adapter_revoke_grant",
    "adapter_upload",
    "adapter_validate",
]


def _resolve_base(base: ServedModel | str) -> ServedModel:
    if isinstance(base, ServedModel):
        return base
    model = ServedModel.objects.filter(name=base).first()
    if model is None:
        raise ValidationError(f"unknown base model {base!r}; register it with load_model first")
    return model


def adapter_registration_check(*, name: str, base: ServedModel | str) -> Adapter | None:
    """Whether ``name`` may be registered on ``base``: the adapter it would update (a
    re-registration on the same base), None for a new one; ValidationError otherwise."""
    base_model = _resolve_base(base)
    adapter_name_validator(name)
    if ServedModel.objects.filter(name=name).exists():
        raise ValidationError(f"{name!r} is already a served model's name; pick another")
    existing = Adapter.objects.select_related("base_model").filter(name=name).first()
    if existing is not None and existing.base_model_id != base_model.pk:
        raise ValidationError(
            f"adapter {name!r} is registered on base model {existing.base_model.name!r}; "
            f"delete it before registering it on {base_model.name!r}"
        )
    return existing


def _save(
    *,
    name: str,
    base: ServedModel | str,
    path: Path,
    stored_by_platform: bool,
    tenants: Iterable[Tenant],
    actor: Any,
    actor_label: str | None,
    enqueue: bool,
) -> Adapter:
    """Create the adapter, or point the existing one of that name at the new files."""
    base_model = _resolve_base(base)
    existing = Adapter.objects.select_for_update().filter(name=name).first()
    if existing is None:
        adapter = Adapter.objects.create(
            name=name, base_model=base_model, path=str(path), stored_by_platform=stored_by_platform
        )
        action = "adapter.upload" if stored_by_platform else "adapter.register"
    else:
        adapter = _replace_files(existing, path=path, stored_by_platform=stored_by_platform)
        action = "adapter.update"
    tenants = list(tenants)
    if tenants:
        adapter.tenants.add(*tenants)
    catalog_epoch_bump()
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action=action,
        target=adapter,
        details={"base": base_model.name, "path": str(path), "tenants": [t.slug for t in tenants]},
    )
    if enqueue:
        adapter_request_validation(adapter=adapter)
    return adapter


def _replace_files(adapter: Adapter, *, path: Path, stored_by_platform: bool) -> Adapter:
    """Re-registration: the adapter is validated again before it is served again. Engines keep
    the old version until the new one is ready (then they load it) or fails (then they drop
    it); files the platform stored for the old version are removed."""
    old_path, old_stored = Path(adapter.path), adapter.stored_by_platform
    adapter.path = str(path)
    adapter.stored_by_platform = stored_by_platform
    adapter.state = Adapter.State.UPLOADED
    adapter.failure_reason = ""
    adapter.save(
        update_fields=["path", "stored_by_platform", "state", "failure_reason", "updated_at"]
    )
    if old_stored and old_path != Path(path):
        transaction.on_commit(lambda: shutil.rmtree(old_path, ignore_errors=True))
    return adapter


@transaction.atomic
def adapter_register(
    *,
    path: str | Path,
    name: str,
    base: ServedModel | str,
    tenants: Iterable[Tenant] = (),
    actor: Any = None,
    actor_label: str | None = None,
    enqueue: bool = True,
) -> Adapter:
    """Register an adapter directory the operator keeps on disk; its files are never moved.
    Registering a name again (on the same base) updates that adapter to these files."""
    adapter_registration_check(name=name, base=base)
    try:
        directory = Path(path).expanduser().resolve()
        is_dir = directory.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise ValidationError(f"{str(path)[:200]!r} cannot be read as a directory: {exc}") from exc
    if not is_dir:
        raise ValidationError(f"{directory} is not a directory")
    return _save(
        name=name,
        base=base,
        path=directory,
        stored_by_platform=False,
        tenants=tenants,
        actor=actor,
        actor_label=actor_label,
        enqueue=enqueue,
    )


def adapter_upload(
    *,
    name: str,
    base: ServedModel | str,
    files: Iterable[Any] = (),
    archive: IO[bytes] | None = None,
    tenants: Iterable[Tenant] = (),
    actor: Any = None,
    actor_label: str | None = None,
    enqueue: bool = True,
) -> Adapter:
    """Store uploaded adapter files (the two files, or a zip holding them) and register them;
    uploading under an existing name (on the same base) updates that adapter.

    ``files`` are file objects named ``adapter_config.json`` and ``adapter_model.safetensors``
    (Django's UploadedFile, or any object with ``name`` and ``read``).
    """
    adapter_registration_check(name=name, base=base)
    directory = store_upload(name=name, files=files, archive=archive)
    try:
        with transaction.atomic():
            return _save(
                name=name,
                base=base,
                path=directory,
                stored_by_platform=True,
                tenants=tenants,
                actor=actor,
                actor_label=actor_label,
                enqueue=enqueue,
            )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def adapter_request_validation(*, adapter: Adapter) -> None:
    """Queue validation on the Celery worker once the current transaction commits."""
    from controlplane.adapters.tasks import validate_adapter

    adapter_id = adapter.pk

    def enqueue() -> None:
        try:
            validate_adapter.delay(adapter_id)
        except Exception as exc:
            logger.error("could not queue validation of adapter %s: %s", adapter_id, exc)

    transaction.on_commit(enqueue)


def adapter_validate(*, adapter_id: int) -> Adapter | None:
    """Validate the adapter's files against its base model and record the outcome.

    Runs in the Celery worker (or inline from ``register_adapter``). Returns None if the
    adapter was deleted meanwhile. A failure is a state with a reason, never an exception.
    """
    with transaction.atomic():
        adapter = (
            Adapter.objects.select_for_update()
            .select_related("base_model")
            .filter(pk=adapter_id)
            .first()
        )
        if adapter is None:
            return None
        was_ready = adapter.state == Adapter.State.READY
        # A version validated before may be in the engines' registry (re-registered or
        # validated again); a failure now withdraws it.
        was_published = bool(adapter.checksum)
        adapter.state = Adapter.State.VALIDATING
        adapter.failure_reason = ""
        adapter.save(update_fields=["state", "failure_reason", "updated_at"])
        if was_ready:  # not servable while validating again
            catalog_epoch_bump()

    outcome = adapter_inspect(adapter)
    with transaction.atomic():
        current = Adapter.objects.select_for_update().filter(pk=adapter_id).first()
        if current is None:
            return None
        if isinstance(outcome, str):
            current.state = Adapter.State.FAILED
            current.failure_reason = outcome
            current.checksum = ""
        else:
            current.state = Adapter.State.READY
            current.failure_reason = ""
            current.checksum = outcome.checksum
            current.rank = outcome.rank
            current.lora_alpha = outcome.lora_alpha
            current.target_modules = list(outcome.target_modules)
        current.validated_at = timezone.now()
        current.save()
        audit_record(
            action="adapter.validate",
            target=current,
            actor_label="validation",
            details={"state": current.state, "reason": current.failure_reason},
        )
        if current.is_ready:
            engine_sync.publish_adapter(
                model=adapter.base_model.name,
                ref=engine_sync.adapter_ref(
                    name=current.name, checksum=current.checksum, path=current.path
                ),
            )
        elif was_published:
            engine_sync.withdraw_adapter(model=adapter.base_model.name, name=current.name)
        catalog_epoch_bump()
    return current


@transaction.atomic
def adapter_grant(
    *, adapter: Adapter, tenant: Tenant, actor: Any = None, actor_label: str | None = None
) -> None:
    """Let ``tenant`` call ``adapter`` (once ready); granting twice is harmless."""
    adapter.tenants.add(tenant)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="adapter.grant",
        target=adapter,
        details={"tenant": tenant.slug},
    )
    catalog_epoch_bump()


@transaction.atomic
def adapter_revoke_grant(
    *, adapter: Adapter, tenant: Tenant, actor: Any = None, actor_label: str | None = None
) -> None:
    adapter.tenants.remove(tenant)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="adapter.revoke_grant",
        target=adapter,
        details={"tenant": tenant.slug},
    )
    catalog_epoch_bump()


@transaction.atomic
def adapter_set_tenants(
    *,
    adapter: Adapter,
    tenants: Iterable[Tenant],
    actor: Any = None,
    actor_label: str | None = None,
) -> None:
    """Grant ``adapter`` to exactly ``tenants``: the new ones are granted, the others revoked,
    each change audited as by ``adapter_grant`` and ``adapter_revoke_grant``."""
    wanted, current = set(tenants), set(adapter.tenants.all())
    for tenant in wanted - current:
        adapter_grant(adapter=adapter, tenant=tenant, actor=actor, actor_label=actor_label)
    for tenant in current - wanted:
        adapter_revoke_grant(adapter=adapter, tenant=tenant, actor=actor, actor_label=actor_label)


@transaction.atomic
def adapter_delete(*, adapter: Adapter, actor: Any = None, actor_label: str | None = None) -> None:
    """Delete the adapter, unload it from engines and remove files the platform stored."""
    name, model, path = adapter.name, adapter.base_model.name, Path(adapter.path)
    stored = adapter.stored_by_platform
    audit_record(actor=actor, actor_label=actor_label, action="adapter.delete", target=adapter)
    adapter.delete()
    engine_sync.withdraw_adapter(model=model, name=name)
    catalog_epoch_bump()
    if stored:
        transaction.on_commit(lambda: shutil.rmtree(path, ignore_errors=True))
