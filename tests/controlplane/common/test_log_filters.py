"""A readiness probe's 503 is not logged as a server error; every other 5xx still is."""

from __future__ import annotations

import logging

from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.log import log_response


def _logged(caplog, path: str, status: int) -> list[logging.LogRecord]:
    caplog.clear()
    request = RequestFactory().get(path)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        log_response(
            "%s: %s",
            "Service Unavailable",
            path,
            response=HttpResponse(status=status),
            request=request,
        )
    return [r for r in caplog.records if r.name == "django.request"]


def test_a_not_ready_probe_is_quiet_and_other_errors_are_not(caplog):
    assert _logged(caplog, "/ready", 503) == []
    assert [r.levelname for r in _logged(caplog, "/v1/chat/completions", 503)] == ["ERROR"]
    assert [r.levelname for r in _logged(caplog, "/ready", 500)] == ["ERROR"]
