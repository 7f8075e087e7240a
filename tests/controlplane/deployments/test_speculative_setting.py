"""A served model's speculative-decoding setting reaches the engine that run_engine starts."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from controlplane.deployments.models import ServedModel
from engine.args import engine_config_from_args

pytestmark = pytest.mark.django_db


@pytest.fixture
def started(monkeypatch):
    """The EngineConfig run_engine would start its engine with (the service is not run)."""
    configs = []

    def serve(args, *, model_path, model_name):
        configs.append(engine_config_from_args(args, model_path))
        return 0

    monkeypatch.setattr("controlplane.deployments.management.commands.run_engine.serve", serve)
    # run_engine exports the key prefix for the service; put the environment back after.
    monkeypatch.setenv("PLATFORM_REDIS_PREFIX", os.environ.get("PLATFORM_REDIS_PREFIX", "llmp"))
    return configs


@pytest.mark.parametrize("setting", [True, False])
def test_run_engine_speculates_as_the_served_model_says(started, tiny_llama, setting):
    ServedModel.objects.create(
        name="m",
        path=str(tiny_llama),
        architecture="LlamaForCausalLM",
        speculative_decoding=setting,
    )
    call_command("run_engine", "--model", "m")
    assert started[-1].enable_speculative_decoding is setting
    # Off by default: on open chat it costs a little speed on CPUs today (docs/benchmarks.md).
    assert ServedModel._meta.get_field("speculative_decoding").default is False


def test_the_command_line_can_turn_it_off_for_one_engine(started, tiny_llama):
    ServedModel.objects.create(name="m", path=str(tiny_llama), architecture="LlamaForCausalLM")
    call_command("run_engine", "--model", "m", "--no-speculative-decoding")
    assert started[-1].enable_speculative_decoding is False
