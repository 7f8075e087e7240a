"""`manage.py check --deploy` passes with the production environment docs/operations.md lists,
and the defaults are safe: DEBUG off and a strong generated secret key; only HTTPS, which
depends on how the site is reached, is left for the deployment to switch on."""

from __future__ import annotations

import os
import re
import secrets
import subprocess

from controlplane.launcher.process_commands import REPO, manage_command

# docs/operations.md, "Production settings" (the secret key comes from a secret store there).
PRODUCTION_ENV = {
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "llm.example.com",
    "DJANGO_HTTPS": "1",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "DATABASE_URL": "postgresql://platform:secret@db.internal:5432/platform",
}


def _check_deploy(tmp_path, **env) -> subprocess.CompletedProcess:
    unset = {"DJANGO_DEBUG", "DJANGO_SECRET_KEY", "DJANGO_HTTPS", "DJANGO_SECURE_SSL_REDIRECT"}
    base = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        manage_command("check", "--deploy", "--fail-level", "WARNING"),
        cwd=REPO,
        env={**base, "PLATFORM_VAR_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_passes_with_the_documented_production_environment(tmp_path):
    result = _check_deploy(tmp_path, **PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_defaults_leave_only_the_https_switches_to_the_deployment(tmp_path):
    result = _check_deploy(tmp_path)
    assert result.returncode != 0
    found = set(re.findall(r"\((\w+\.[WE]\d+)\)", result.stderr))
    assert found == {"security.W004", "security.W008", "security.W012", "security.W016"}
