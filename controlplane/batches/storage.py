"""The storage that holds files' bytes (settings.STORAGES["batch_files"]): local or S3."""

from __future__ import annotations

from django.core.files.storage import Storage, storages


def file_storage() -> Storage:
    return storages["batch_files"]
