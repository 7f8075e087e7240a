"""Registering a model in the background: the admin saves the row ``registering`` and queues
``deployments.register``; the Celery worker downloads a hub id, converts a GGUF file and
validates the checkpoint (controlplane/deployments/checkpoints.py), recording its stage and
progress on the row as it goes, and ends it ``ready`` (served from then on) or ``failed`` with
the reason. The web request only checks what is cheap: the name, and that the source is a path
on the server or a hub id.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.db import transaction

from controlplane.audit.services import audit_record
from controlplane.common.redis_epoch import catalog_epoch_bump
from controlplane.deployments.checkpoints import (
    ModelRegistrationError,
    Progress,
    checkpoint_inspect,
    no_progress,
)
from controlplane.deployments.hub import HubId, Transfer, hub_download, hub_id_parse
from controlplane.deployments.models import ServedModel

logger = logging.getLogger(__name__)

State = ServedModel.State


def model_name_check(name: str) -> str:
    """The name, stripped; ModelRegistrationError when clients could not use it."""
    name = (name or "").strip()
    if not name or any(c.isspace() for c in name) or ":" in name or len(name) > 200:
        raise ModelRegistrationError(
            f"model name {name!r} is invalid: use 1-200 characters, no spaces or ':'"
        )
    return name


def checkpoint_source_parse(source: str) -> Path | HubId:
    """A path that exists on the server, else a hub id; ModelRegistrationError for neither."""
    source = (source or "").strip()
    try:
        path = Path(source).expanduser()
        if source and path.exists():
            return path
    except (OSError, RuntimeError, ValueError):  # a name too long; "~nobody/": no such home
        pass  # not a path this server can read: maybe a hub id
    hub_id = hub_id_parse(source)
    if hub_id is None:
        raise ModelRegistrationError(
            f"{source!r} is not a file or folder on the server, nor a Hugging Face hub id "
            "(org/name, optionally @revision)"
        )
    return hub_id


def checkpoint_fetch(
    *, source: str, progress: Progress = no_progress, transfer: Transfer | None = None
) -> Path:
    """The local checkpoint ``source`` names: the path itself, or a hub id's download."""
    where = checkpoint_source_parse(source)
    if isinstance(where, Path):
        return where
    return hub_download(where, progress=progress, transfer=transfer)


@transaction.atomic
def served_model_request_registration(
    *, source: str, name: str, actor: Any = None, actor_label: str | None = None
) -> ServedModel:
    """Save ``name`` as registering from ``source`` (a path on the server or a hub id) and
    queue its registration on the Celery worker. Refuses a name already registered: a new
    checkpoint under a served name would stop serving it until the new one is ready."""
    name = model_name_check(name)
    checkpoint_source_parse(source)
    if ServedModel.objects.filter(name=name).exists():
        raise ModelRegistrationError(f"a model named {name!r} is already registered")
    model = ServedModel.objects.create(
        name=name,
        path=source.strip(),
        source=source.strip(),
        state=State.REGISTERING,
        stage="queued",
    )
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="model.register",
        target=model,
        details={"source": model.source},
    )
    _enqueue(model.pk)
    return model


@transaction.atomic
def served_model_retry_registration(
    *, model: ServedModel, actor: Any = None, actor_label: str | None = None
) -> ServedModel:
    """Register a failed model again from its source (after the operator fixed the cause)."""
    if model.state != State.FAILED:
        raise ModelRegistrationError(f"{model.name} is {model.state}; only a failed one is retried")
    _record(model.pk, state=State.REGISTERING, stage="queued", failure_reason="")
    audit_record(actor=actor, actor_label=actor_label, action="model.register", target=model)
    _enqueue(model.pk)
    model.refresh_from_db()
    return model


def _enqueue(model_id: int) -> None:
    """Queue the task once the row is committed (the worker must find it)."""
    from controlplane.deployments.tasks import register_model

    def enqueue() -> None:
        try:
            register_model.delay(model_id)
        except Exception as exc:  # Redis down: say so on the row, rather than wait forever
            logger.error("could not queue registration of model %s: %s", model_id, exc)
            _record(
                model_id,
                state=State.FAILED,
                failure_reason=f"could not queue the registration on the Celery broker: {exc}",
            )

    transaction.on_commit(enqueue)


def _record(model_id: int, **fields: Any) -> None:
    # update(), not save(): the row may have been deleted meanwhile, and a progress write must
    # not overwrite what the operator changed on the change page.
    ServedModel.objects.filter(pk=model_id).update(**fields)


class _ProgressRecorder:
    """Writes the stage and the bytes done on the row; bytes only when the whole percent
    changes, so a multi-GB download costs about a hundred writes, not one per chunk."""

    def __init__(self, model_id: int):
        self.model_id = model_id
        self.percent: int | None = None

    def stage(self, message: str) -> None:
        _record(self.model_id, stage=message[:300], progress_done=0, progress_total=0)
        self.percent = None

    def transfer(self, done: int, total: int) -> None:
        percent = done * 100 // total if total else 0
        if percent != self.percent:
            self.percent = percent
            _record(self.model_id, progress_done=done, progress_total=total)


def served_model_registration_run(*, model_id: int) -> ServedModel | None:
    """Fetch, convert and validate a registering model's checkpoint and record the outcome.

    Run by the Celery worker. Returns None when the row is gone or not registering (deleted,
    or a redelivered task whose work was done). A failure is a state with a reason, never an
    exception, so the task is not retried into the same error.
    """
    model = ServedModel.objects.filter(pk=model_id, state=State.REGISTERING).first()
    if model is None:
        return None
    recorder = _ProgressRecorder(model_id)
    try:
        path = checkpoint_fetch(
            source=model.source, progress=recorder.stage, transfer=recorder.transfer
        )
        checkpoint = checkpoint_inspect(path=path, progress=recorder.stage)
    except ModelRegistrationError as exc:
        return _finish(model_id, state=State.FAILED, failure_reason=str(exc))
    except Exception as exc:
        logger.exception("registering model %s failed unexpectedly", model.name)
        reason = f"unexpected error: {type(exc).__name__}: {exc}"
        return _finish(model_id, state=State.FAILED, failure_reason=reason)
    return _finish(
        model_id, state=State.READY, failure_reason="", stage="ready", **checkpoint.fields()
    )


@transaction.atomic
def _finish(model_id: int, **fields: Any) -> ServedModel | None:
    model = ServedModel.objects.select_for_update().filter(pk=model_id).first()
    if model is None:
        return None
    for field, value in {**fields, "progress_done": 0, "progress_total": 0}.items():
        setattr(model, field, value)
    model.save()
    audit_record(
        actor_label="registration",
        action="model.registration",
        target=model,
        details={"state": model.state, "reason": model.failure_reason},
    )
    if model.is_ready:
        catalog_epoch_bump()  # API processes serve it within a second
    return model
