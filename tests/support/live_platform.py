"""The control plane's end-to-end platform as its tests see it: the served model's name, the
admin's password and the handle the ``live_platform`` fixture yields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.platform_services import engine_status_records
from tests.support.shared_database import FileDatabase

MODEL = "tiny-cp"
PREFIX = "cpe2e"
ADMIN_PASSWORD = "admin-pass-123"


@dataclass
class LivePlatform:
    base_url: str
    redis_url: str
    db: FileDatabase
    workdir: Path

    def engine_statuses(self) -> list[bytes | None]:
        return engine_status_records(self.redis_url, PREFIX, MODEL)
