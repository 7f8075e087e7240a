"""The Django snippet the API benches run (``python -c``, in the bench's environment) to
register a checkpoint as a served model and, unless told not to, print a fresh key of a "bench"
tenant."""

from __future__ import annotations

REGISTER_MODEL_AND_KEY = """
import sys
import django
django.setup()
from controlplane.deployments.models import ServedModel
from controlplane.tenants.services import api_key_create, tenant_create
name, path, max_model_len, with_key = sys.argv[-4:]
ServedModel.objects.update_or_create(name=name, defaults={"path": path,
    "architecture": "LlamaForCausalLM", "max_model_len": int(max_model_len)})
if with_key == "1":
    print(api_key_create(tenant=tenant_create(name="bench")).secret)
"""


def register_command(
    python: str, name: str, checkpoint, max_model_len: int, *, key: bool = True
) -> list[str]:
    """The command line that registers ``checkpoint`` as ``name``; with ``key``, its last
    output line is the key."""
    return [
        python, "-c", REGISTER_MODEL_AND_KEY, name, str(checkpoint), str(max_model_len), str(int(key))
    ]  # fmt: skip
