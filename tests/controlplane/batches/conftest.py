"""Files stored in a temporary folder for each test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _files_in_tmp(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "batch_files": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "files")},
        },
    }
