"""Usage tests keep spool files in a folder of their own, never in the checkout's var/."""

from __future__ import annotations

import pytest

from controlplane.usage.spool import spool


@pytest.fixture(autouse=True)
def _private_spool(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    spool._pending = None
    yield
    spool._pending = None
