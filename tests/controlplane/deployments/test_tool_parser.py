"""A served model's tool-call format: detected at registration, editable in the admin, and
carried to the API by the catalog."""

from __future__ import annotations

import shutil

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEvent
from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import served_model_register
from controlplane.deployments.tool_parsers import default_tool_parser

pytestmark = pytest.mark.django_db

LLAMA3_TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
)


@pytest.mark.parametrize(
    ("architecture", "template", "parser"),
    [
        ("Qwen2ForCausalLM", None, "hermes"),
        ("Qwen3ForCausalLM", "{{ '<tool_call>' }}", "hermes"),
        ("LlamaForCausalLM", None, "llama3_json"),
        ("LlamaForCausalLM", LLAMA3_TEMPLATE, "llama3_json"),
        ("LlamaForCausalLM", "<|im_start|>{{ m.content }}", "hermes"),  # SmolLM2: ChatML
        ("MistralForCausalLM", None, "hermes"),
    ],
)
def test_default_from_template_then_architecture(architecture, template, parser):
    assert default_tool_parser(architecture, template) == parser


def test_registration_detects_the_format(checkpoints, tmp_path):
    chatml_llama = served_model_register(path=checkpoints.get("llama"), name="chatml")
    assert chatml_llama.tool_parser == "hermes"
    llama3 = shutil.copytree(checkpoints.get("llama3"), tmp_path / "llama3")
    (llama3 / "chat_template.jinja").write_text(LLAMA3_TEMPLATE)
    assert served_model_register(path=llama3, name="l3").tool_parser == "llama3_json"
    assert served_model_register(path=checkpoints.get("qwen2"), name="q").tool_parser == "hermes"
    assert catalog_snapshot().models["l3"].tool_parser == "llama3_json"


def test_admin_changes_the_format_and_the_api_sees_it(admin_client, tiny_llama):
    model = served_model_register(path=tiny_llama, name="tiny")
    assert catalog_snapshot().models["tiny"].tool_parser == "hermes"
    page = admin_client.get(reverse("admin:deployments_servedmodel_change", args=[model.pk]))
    assert 'name="tool_parser"' in page.content.decode()
    response = admin_client.post(
        reverse("admin:deployments_servedmodel_change", args=[model.pk]),
        {
            "max_model_len": model.max_model_len,
            "tool_parser": "llama3_json",
            "drop_attribution_header": "on",
            "is_active": "on",
        },
    )
    assert response.status_code == 302, response.content[:3000]
    assert catalog_snapshot().models["tiny"].tool_parser == "llama3_json"
    event = AuditEvent.objects.get(action="model.update")
    assert event.details == {"tool_parser": ["hermes", "llama3_json"]}


def test_automatic_rows_take_the_architecture_default(tiny_llama):
    ServedModel.objects.create(
        name="q", path=str(tiny_llama), architecture="Qwen2ForCausalLM", tool_parser=""
    )
    ServedModel.objects.create(
        name="l", path=str(tiny_llama), architecture="LlamaForCausalLM", tool_parser=""
    )
    models = catalog_snapshot().models
    assert models["q"].tool_parser == "hermes" and models["l"].tool_parser == "llama3_json"


def test_admin_switches_the_attribution_line_off_and_the_api_sees_it(admin_client, tiny_llama):
    """Claude Code's attribution line is dropped by default (inference/messages/); an
    operator keeps it in the prompt from the model's page."""
    model = served_model_register(path=tiny_llama, name="tiny")
    assert catalog_snapshot().models["tiny"].drop_attribution_header is True
    page = admin_client.get(reverse("admin:deployments_servedmodel_change", args=[model.pk]))
    assert 'name="drop_attribution_header"' in page.content.decode()
    response = admin_client.post(
        reverse("admin:deployments_servedmodel_change", args=[model.pk]),
        {"max_model_len": model.max_model_len, "tool_parser": "hermes", "is_active": "on"},
    )
    assert response.status_code == 302, response.content[:3000]
    assert catalog_snapshot().models["tiny"].drop_attribution_header is False
    event = AuditEvent.objects.get(action="model.update")
    assert event.details == {"drop_attribution_header": [True, False]}
