"""Without DJANGO_SECRET_KEY, a random secret key is generated once into the var dir (mode
0600) and every later process reuses it; with DJANGO_SECRET_KEY, that is the key."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor

from controlplane.common.private_files import read_or_create_private_file
from tests.foundation.settings_probe import settings_of_a_new_process


def _secret_key(var_dir, **env) -> str:
    [key] = settings_of_a_new_process(var_dir, "SECRET_KEY", unset={"DJANGO_SECRET_KEY"}, **env)
    return key


def test_generated_secret_key_is_private_and_reused(tmp_path):
    first = _secret_key(tmp_path)
    path = tmp_path / "secret_key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first
    assert len(first) >= 50 and not first.startswith("django-insecure")
    assert _secret_key(tmp_path) == first
    assert _secret_key(tmp_path / "elsewhere") != first


def test_secret_key_from_the_environment_is_used_and_nothing_is_written(tmp_path):
    given = "from-the-secret-store"
    assert _secret_key(tmp_path, DJANGO_SECRET_KEY=given) == given
    assert not (tmp_path / "secret_key").exists()


def test_processes_starting_together_agree_on_one_key(tmp_path):
    path = tmp_path / "secret_key"

    def start(i: int) -> str:
        return read_or_create_private_file(path, lambda: f"key-{i}")

    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(start, range(32)))
    assert len(keys) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["secret_key"]  # no temporary file left
