"""A served model's reasoning format: detected from its chat template at registration,
editable in the admin (audited), and carried to the API by the catalog."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEvent
from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments.services import served_model_register
from tests.support.checkpoints import with_thinking_template

pytestmark = pytest.mark.django_db


def test_registration_detects_thinking_and_the_admin_changes_it(admin_client, tiny_llama, tmp_path):
    thinking = with_thinking_template(tiny_llama, tmp_path / "thinking")
    model = served_model_register(path=thinking, name="thinker")
    plain = served_model_register(path=tiny_llama, name="plain")
    assert (model.reasoning_parser, plain.reasoning_parser) == ("think", "")
    assert catalog_snapshot().models["thinker"].reasoning_parser == "think"

    url = reverse("admin:deployments_servedmodel_change", args=[model.pk])
    assert 'name="reasoning_parser"' in admin_client.get(url).content.decode()
    fields = {"max_model_len": model.max_model_len, "tool_parser": "hermes", "is_active": "on"}
    response = admin_client.post(url, {**fields, "reasoning_parser": "gpt_oss"})
    assert response.status_code == 302, response.content[:3000]
    assert catalog_snapshot().models["thinker"].reasoning_parser == "gpt_oss"
    event = AuditEvent.objects.get(action="model.update")
    assert event.details["reasoning_parser"] == ["think", "gpt_oss"]
    # Back to none: the model's output is all answer again.
    admin_client.post(url, {**fields, "reasoning_parser": ""})
    assert catalog_snapshot().models["thinker"].reasoning_parser == ""
