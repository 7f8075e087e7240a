"""The fixtures' shared command process answers as ``python manage.py`` would, and the migrated
copy they start from is a database ``migrate`` has nothing left to do on."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from controlplane.launcher.stack import StartupError
from controlplane.launcher.stack import run_manage as run_manage_in_a_new_process
from tests.support.manage_server import run_manage
from tests.support.shared_database import FileDatabase


@pytest.fixture
def db(tmp_path, redis_server) -> FileDatabase:
    return FileDatabase(tmp_path / "db.sqlite3", redis_server.url).migrate()


def test_the_migrated_copy_has_no_migration_left(db):
    done = db.manage("migrate", "--check")  # exits 1 when a migration is unapplied
    assert done.returncode == 0
    with sqlite3.connect(db.path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"django_migrations", "auth_user"} <= tables


def test_a_command_prints_what_a_new_process_prints(db):
    ours = db.manage("create_tenant", "Printers")
    theirs = run_manage_in_a_new_process(db.env, "create_tenant", "Copiers")
    assert ours.stdout == theirs.stdout.replace("Copiers", "Printers").replace(
        "copiers", "printers"
    )
    key = db.manage("create_api_key", "--tenant", "Printers")
    assert key.stdout.startswith("sk-") and key.stdout.count("\n") == 1
    assert "the secret below is shown only once" in key.stderr  # stderr apart, as before


def test_a_failing_command_fails_with_its_message_and_the_next_one_runs(db):
    with pytest.raises(StartupError, match=r"CommandError: no tenant named .Nobody."):
        db.manage("create_api_key", "--tenant", "Nobody")
    assert db.manage("create_tenant", "Somebody").returncode == 0


def test_each_command_sees_what_other_processes_wrote_meanwhile(db):
    db.manage("create_tenant", "First")
    run_manage_in_a_new_process(db.env, "create_tenant", "Second")
    code = "from controlplane.tenants.models import Tenant; print(Tenant.objects.count())"
    assert db.manage("shell", "-v", "0", "-c", code).stdout.strip() == "2"


def test_output_of_a_commands_subprocess_is_captured(db):
    code = f"import subprocess; subprocess.run([{sys.executable!r}, '-c', 'print(42)'])"
    assert db.manage("shell", "-v", "0", "-c", code).stdout == "42\n"


def test_a_command_past_its_timeout_is_stopped(db):
    with pytest.raises(subprocess.TimeoutExpired):
        run_manage(db.env, "shell", "-c", "import time; time.sleep(30)", timeout=1)
    assert db.manage("shell", "-v", "0", "-c", "print('back')").stdout == "back\n"  # a new process
