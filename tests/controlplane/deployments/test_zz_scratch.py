import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.adapters import services
from controlplane.adapters.tasks import validate_adapter
from controlplane.deployments.models import ServedModel
from controlplane.tenants.access import Principal
from controlplane.tenants.services import tenant_create
from engine.lora.testing import make_random_adapter
from inference.catalog import resolve_model, visible_models

pytestmark = pytest.mark.django_db(transaction=True)


async def test_count(redis_client, tiny_llama, settings, tmp_path):
    settings.ADAPTER_UPLOAD_DIR = str(tmp_path / "u")
    def setup():
        base = ServedModel.objects.create(name="tiny-llama", path=str(tiny_llama), architecture="LlamaForCausalLM")
        t = tenant_create(name="A")
        d = make_random_adapter(tiny_llama, tmp_path / "s", rank=8)
        a = services.adapter_register(path=d, name="bot", base=base, tenants=[t], enqueue=False)
        validate_adapter(a.pk)
        return t
    t = await sync_to_async(setup)()
    p = Principal(key_id=1, key_prefix="sk", tenant_id=t.pk, tenant_slug=t.slug, cache_salt="x", allowed_models=None)
    await resolve_model(p, "tiny-llama", with_adapters=True)  # warm
    for label, call in [
        ("resolve base", lambda: resolve_model(p, "tiny-llama", with_adapters=True)),
        ("resolve adapter", lambda: resolve_model(p, "bot", with_adapters=True)),
        ("visible_models", lambda: visible_models(p, with_adapters=True)),
        ("visible_models no adapters", lambda: visible_models(p)),
    ]:
        from django.db.backends.sqlite3 import base as sb
        seen = []
        real = sb.SQLiteCursorWrapper.execute
        def ex(self, sql, params=None):
            seen.append(sql)
            return real(self, sql, params)
        sb.SQLiteCursorWrapper.execute = ex
        try:
            await call()
        finally:
            sb.SQLiteCursorWrapper.execute = real
        print("QUERIES", label, len(seen))
