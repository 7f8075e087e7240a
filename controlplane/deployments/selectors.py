"""Reads on served models."""

from __future__ import annotations

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


def served_model_get(*, name: str) -> ServedModel | None:
    return ServedModel.objects.filter(name=name).first()


def served_model_get_by_pk(*, pk: int) -> ServedModel:
    """The stored row (raises ServedModel.DoesNotExist)."""
    return ServedModel.objects.get(pk=pk)
