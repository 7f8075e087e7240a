"""A migrated SQLite file, made once per set of migrations and copied where a fixture wants one.

Migrating an empty file runs every migration of the project (about 4.5 s of CPU in its own
process on the CI runner); the suite's stacks each need one. A copy of the same result is what
``manage.py migrate`` would have written, made in milliseconds."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import sqlite3
import tempfile
from pathlib import Path

from tests.support.manage_server import run_manage

REPO = Path(__file__).resolve().parents[2]


def copy_migrated_database(dest: Path) -> Path:
    """``dest``, a SQLite file holding the fully migrated schema (and what data migrations
    add). ``dest`` must not exist yet."""
    assert not dest.exists(), f"{dest} exists: its data would be lost"
    template = _template()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(template) as source, sqlite3.connect(dest) as target:
        source.backup(target)
    source.close()
    target.close()
    return dest


@functools.cache
def migrations_key() -> str:
    """A digest of every migration file: a new or changed one makes a new template. Only the
    project's own folders are searched (.venv alone holds some 20,000 files)."""
    digest = hashlib.sha256()
    folders = [p for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")]
    for path in sorted(p for folder in folders for p in folder.glob("**/migrations/*.py")):
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _template() -> Path:
    folder = Path(tempfile.gettempdir()) / "llmp-test-migrated"
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / f"{migrations_key()}.sqlite3"
    with (folder / f"{template.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            partial = folder / f"{template.name}.partial"
            partial.unlink(missing_ok=True)
            env = {
                **os.environ,
                "DATABASE_URL": f"sqlite:///{partial}",
                "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            }
            run_manage(env, "migrate", "--noinput", "-v0")
            partial.rename(template)
    return template


def migrate_sqlite_in_advance(env: dict[str, str]) -> None:
    """When ``env`` names a SQLite file that does not exist yet, make it a migrated copy (a
    ``migrate`` that follows then has nothing to do)."""
    url = env.get("DATABASE_URL", "")
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            copy_migrated_database(path)
