"""Usage records and daily usage as CSV, streamed (a month of records need not fit in memory).

Costs are exact decimal text in BILLING_CURRENCY; times are UTC ISO 8601.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator

from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from controlplane.billing.money import amount_text, currency

RECORD_COLUMNS = (
    "created_at",
    "request_id",
    "tenant",
    "key_prefix",
    "model",
    "adapter",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost",
    "currency",
    "status",
    "finish_reason",
    "latency_s",
    "time_to_first_token_s",
    "batch_id",
    "end_user",
)
DAILY_COLUMNS = (
    "date",
    "tenant",
    "key_prefix",
    "model",
    "adapter",
    "num_requests",
    "num_errors",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost",
    "currency",
)


class _Echo:
    def write(self, value: str) -> str:
        return value


def _lines(header: Iterable[str], rows: Iterable[Iterable]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow(row)


def _record_rows(records: QuerySet) -> Iterator[tuple]:
    unit = currency()
    for r in records.select_related("tenant").order_by("created_at", "pk").iterator(2000):
        yield (
            r.created_at.isoformat(),
            r.request_id,
            r.tenant.name,
            r.key_prefix,
            r.model,
            r.adapter,
            r.prompt_tokens,
            r.cached_tokens,
            r.completion_tokens,
            amount_text(r.cost_units),
            unit,
            r.status,
            r.finish_reason,
            f"{r.latency:.3f}",
            "" if r.time_to_first_token is None else f"{r.time_to_first_token:.3f}",
            r.batch_id,
            r.end_user,
        )


def _daily_rows(days: QuerySet) -> Iterator[tuple]:
    unit = currency()
    ordered = days.select_related("tenant").order_by("date", "tenant__name", "key_prefix", "model")
    for d in ordered.iterator(2000):
        yield (
            d.date.isoformat(),
            d.tenant.name,
            d.key_prefix,
            d.model,
            d.adapter,
            d.num_requests,
            d.num_errors,
            d.prompt_tokens,
            d.cached_tokens,
            d.completion_tokens,
            amount_text(d.cost_units),
            unit,
        )


def _response(lines: Iterator[str], filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def usage_records_csv(records: QuerySet, *, filename: str = "usage-records.csv"):
    return _response(_lines(RECORD_COLUMNS, _record_rows(records)), filename)


def daily_usage_csv(days: QuerySet, *, filename: str = "daily-usage.csv"):
    return _response(_lines(DAILY_COLUMNS, _daily_rows(days)), filename)
