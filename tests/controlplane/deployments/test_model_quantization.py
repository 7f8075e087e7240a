"""``load_model --quantization``: recorded on the served model, refused where it cannot apply."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import ModelRegistrationError, served_model_register


@pytest.mark.django_db
def test_load_model_records_the_quantization_and_says_so(tiny_llama):
    out = io.StringIO()
    call_command("load_model", str(tiny_llama), "--name", "q", "--quantization", "int4", stdout=out)
    assert "weights int4" in out.getvalue()
    assert ServedModel.objects.get(name="q").quantization == "int4"
    # Loading the name again without the flag serves the checkpoint's own weights.
    call_command("load_model", str(tiny_llama), "--name", "q", stdout=io.StringIO())
    assert ServedModel.objects.get(name="q").quantization == ""


@pytest.mark.django_db
def test_an_unknown_quantization_is_refused(tiny_llama):
    with pytest.raises(CommandError):
        call_command("load_model", str(tiny_llama), "--name", "q", "--quantization", "fp8")
    with pytest.raises(ModelRegistrationError, match="int8 or int4"):
        served_model_register(path=tiny_llama, name="q", quantization="fp8")
    assert not ServedModel.objects.filter(name="q").exists()
