"""Acceptance 1 over HTTP: a tenant's key sees and uses only what its tenant was granted."""

from __future__ import annotations

import httpx
import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow


def test_a_key_sees_and_uses_only_its_tenants_models(live_platform, tiny_llama):
    db, base = live_platform.db, live_platform.base_url
    db.manage("load_model", str(tiny_llama), "--name", "b-only")
    db.manage("create_tenant", "Iso A", "--model", MODEL)
    db.manage("create_tenant", "Iso B", "--model", "b-only")
    key_a = db.create_key("Iso A")

    headers = {"Authorization": f"Bearer {key_a}"}
    listed = httpx.get(f"{base}/v1/models", headers=headers, timeout=10).json()
    assert [m["id"] for m in listed["data"]] == [MODEL]
    # B's model is unknown to A, exactly like a model that does not exist (404, not 403).
    for model in ["b-only", "no-such-model"]:
        response = httpx.post(
            f"{base}/v1/completions",
            headers=headers,
            json={"model": model, "prompt": "hi", "max_tokens": 1},
            timeout=30,
        )
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "model_not_found"
    assert httpx.get(f"{base}/v1/models/b-only", headers=headers, timeout=10).status_code == 404
