"""Reads on served models."""

from __future__ import annotations

from django.db.models import QuerySet

from controlplane.deployments.models import ServedModel


def served_model_list(*, active_only: bool = True) -> list[ServedModel]:
    qs = ServedModel.objects.all()
    if active_only:
        qs = qs.filter(is_active=True)
    return list(qs)


def served_models_by_name(*, active_only: bool = True) -> QuerySet[ServedModel]:
    """The served models in name order (the database's collation), one query when read."""
    qs = ServedModel.objects.filter(is_active=True) if active_only else ServedModel.objects.all()
    return qs.order_by("name")


def served_model_names() -> list[str]:
    """The name of every registered model, active or not."""
    return list(ServedModel.objects.values_list("name", flat=True))


def served_model_get(*, name: str) -> ServedModel | None:
    return ServedModel.objects.filter(name=name).first()


def served_model_get_by_pk(*, pk: int) -> ServedModel:
    """The stored row (raises ServedModel.DoesNotExist)."""
    return ServedModel.objects.get(pk=pk)
