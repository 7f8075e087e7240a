"""Reads on served models."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from controlplane.deployments.models import ServedModel


def _servable() -> QuerySet[ServedModel]:
    """Active and ready: a model still registering (or failed) has no checkpoint to serve."""
    return ServedModel.objects.filter(is_active=True, state=ServedModel.State.READY)


def served_model_list(*, active_only: bool = True) -> list[ServedModel]:
    """With ``active_only``, the models that are served: active and ready."""
    return list(_servable() if active_only else ServedModel.objects.all())


def served_models_by_name(*, active_only: bool = True) -> QuerySet[ServedModel]:
    """The served models (active and ready, unless not ``active_only``) in name order (the
    database's collation), one query when read."""
    qs = _servable() if active_only else ServedModel.objects.all()
    return qs.order_by("name")


def served_model_names() -> list[str]:
    """The name of every registered model, active or not."""
    return list(ServedModel.objects.values_list("name", flat=True))


def served_models_named(names: Iterable[str]) -> list[ServedModel]:
    """The registered models of these names; ValidationError naming any that is unknown."""
    names = sorted(set(names))
    models = list(ServedModel.objects.filter(name__in=names))
    missing = set(names) - {m.name for m in models}
    if missing:
        raise ValidationError(f"unknown models: {', '.join(sorted(missing))}")
    return models


def served_model_get(*, name: str) -> ServedModel | None:
    return ServedModel.objects.filter(name=name).first()


def served_model_get_by_pk(*, pk: int) -> ServedModel:
    """The stored row (raises ServedModel.DoesNotExist)."""
    return ServedModel.objects.get(pk=pk)


def generation_model_ids() -> list[int]:
    """Ids of the registered generation models (chat or completions-only), the models LoRA
    adapters can be built on; embeddings models are excluded."""
    return [model.pk for model in ServedModel.objects.all() if not model.is_embedding]
