"""Reads on served models."""

from __future__ import annotations

from controlplane.deployments.models import ServedModel


def served_model_list(*, active_only: bool = True) -> list[ServedModel]:
    qs = ServedModel.objects.all()
    if active_only:
        qs = qs.filter(is_active=True)
    return list(qs)
