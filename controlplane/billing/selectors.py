"""Reads on prices: the price of a model at a time, for many usage records at once."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

from controlplane.billing.models import ModelPrice


class PriceBook:
    """Every price row of some models, oldest first per model; ``at`` finds the row in effect
    at a time (the latest that started at or before it), or None: the model has no price."""

    def __init__(self, rows: Iterable[ModelPrice]):
        self._rows: dict[str, list[ModelPrice]] = defaultdict(list)
        for row in sorted(rows, key=lambda r: r.effective_from):
            self._rows[row.model].append(row)
        self._starts = {m: [r.effective_from for r in rs] for m, rs in self._rows.items()}

    def at(self, model: str, when: datetime) -> ModelPrice | None:
        index = bisect_right(self._starts.get(model, []), when)
        return self._rows[model][index - 1] if index else None


def price_book(*, models: Iterable[str]) -> PriceBook:
    return PriceBook(ModelPrice.objects.filter(model__in=set(models)))


def price_in_effect(*, model: str, when: datetime) -> ModelPrice | None:
    return (
        ModelPrice.objects.filter(model=model, effective_from__lte=when)
        .order_by("-effective_from")
        .first()
    )


def price_history(*, model: str) -> QuerySet[ModelPrice]:
    return ModelPrice.objects.filter(model=model).order_by("-effective_from")
