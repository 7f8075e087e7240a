"""The platform's command lines parse with their programs' own parsers; the environment says
where Redis, the database and the var folder are."""

from __future__ import annotations

import os

from controlplane.launcher.process_commands import (
    ASGI_APPLICATION,
    DAPHNE_LISTEN_BACKLOG,
    daphne_command,
    engine_command,
    platform_environment,
    run_engine_command,
)


def _listening(endpoint: str) -> tuple[str, int, dict]:
    """What Twisted makes of a Daphne ``-e`` endpoint string: (kind, port, options)."""
    from twisted.internet.endpoints import _parseServer

    kind, args, kwargs = _parseServer(endpoint, None)
    return kind, args[0], kwargs


def test_daphne_command_binds_the_host_and_port_and_serves_the_project():
    from daphne.cli import CommandLineInterface

    options = CommandLineInterface().parser.parse_args(daphne_command("0.0.0.0", 8123)[3:])
    (endpoint,) = options.socket_strings
    kind, port, listen = _listening(endpoint)
    assert (kind, listen["interface"], port) == ("TCP", "0.0.0.0", 8123)
    assert options.application == ASGI_APPLICATION


def test_daphne_listens_with_a_backlog_for_connection_bursts():
    """Twisted's default backlog (50) reset connections of a burst of 200."""
    _, port, listen = _listening(daphne_command("::1", 8123)[4])
    assert (listen["interface"], port) == ("::1", 8123)
    assert listen["backlog"] == DAPHNE_LISTEN_BACKLOG >= 1024


def test_engine_command_passes_service_options_as_flags():
    from engine.__main__ import build_parser

    command = engine_command(
        "/ckpt", "tiny", redis_url="redis://r:1/0", max_queued=8, no_prefix_caching=True
    )
    options = build_parser().parse_args(command[3:])
    assert (options.model_path, options.model_name) == ("/ckpt", "tiny")
    assert (options.redis_url, options.max_queued) == ("redis://r:1/0", 8)
    assert options.no_prefix_caching and options.device == "auto"


def test_run_engine_command_is_one_run_engine_accepts():
    from django.core.management import load_command_class

    parser = load_command_class("controlplane.deployments", "run_engine").create_parser(
        "manage.py", "run_engine"
    )
    options = parser.parse_args(run_engine_command("demo", device="cpu")[3:])
    assert (options.model, options.device) == ("demo", "cpu")


def test_platform_environment_sets_what_is_given_and_inherits_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("PLATFORM_REDIS_PREFIX", "inherited")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = platform_environment(
        redis_url="redis://r:1/0", database_url="sqlite:///x.db", var_dir=tmp_path
    )
    assert env["REDIS_URL"] == "redis://r:1/0"
    assert env["DATABASE_URL"] == "sqlite:///x.db"
    assert env["PLATFORM_VAR_DIR"] == str(tmp_path)
    assert env["PLATFORM_REDIS_PREFIX"] == "inherited"
    assert env["PATH"] == os.environ["PATH"]
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "PYTHONDONTWRITEBYTECODE" not in env  # platform processes keep their bytecode
