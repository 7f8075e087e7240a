"""deploy/compose.yaml: every service has what it needs to start and find the others."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.metrics_token import platform_reads_metrics_token_from

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PLATFORM_ROLES = ("migrate", "web", "agent", "engine", "celery", "beat", "batch-worker")


def split_mount(volume: str) -> tuple[str, str]:
    """``source:target[:mode]`` -> (source, target); sources may hold ``${VAR:-default}``."""
    if volume.endswith((":ro", ":rw")):
        volume = volume[:-3]
    source, _, target = volume.rpartition(":")
    return source, target


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]


def test_every_part_of_the_platform_is_a_service(services):
    expected = {"redis", "postgres", "web", "agent", "engine", "celery", "prometheus", "grafana"}
    assert expected <= set(services)


@pytest.mark.parametrize("role", PLATFORM_ROLES)
def test_platform_roles_share_one_image_and_point_at_postgres_and_redis(services, role):
    service = services[role]
    assert service["image"] == "llm-platform"
    assert isinstance(service["command"], list) and service["command"]
    env = service["environment"]
    assert env["DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in env["DATABASE_URL"]
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    assert env["DJANGO_DEBUG"] == "0"
    assert "DJANGO_SECRET_KEY" in env


def test_roles_run_the_commands_of_their_role(services):
    assert services["web"]["command"][:1] == ["daphne"]
    assert services["web"]["command"][-1] == "controlplane.asgi:application"
    assert services["engine"]["command"][:3] == ["python", "manage.py", "run_engine"]
    assert services["celery"]["command"][:3] == ["celery", "-A", "controlplane"]
    assert services["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert "build" in services["migrate"]  # the one service that builds the shared image


def test_the_engine_reserves_a_gpu_and_reports_readiness(services):
    engine = services["engine"]
    devices = engine["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert engine["healthcheck"]["test"][1:4] == [
        "python",
        "-m",
        "controlplane.metrics.engine_ready",
    ]
    assert engine["stop_grace_period"]  # SIGTERM drains: give it time


def test_web_and_engines_read_the_same_checkpoints(services):
    def models_mount(role):
        return [v for v in services[role]["volumes"] if split_mount(v)[1] == "/models"]

    assert models_mount("web") and models_mount("web") == models_mount("engine")
    assert models_mount("agent") == models_mount("web")


def _started_by_default(services) -> set[str]:
    """What `docker compose up` starts: services outside every profile."""
    return {name for name, service in services.items() if not service.get("profiles")}


def test_engines_come_from_the_agent_by_default_and_the_static_engine_only_on_request(services):
    # Both would claim the GPU and could run the same model: never both by default.
    default = _started_by_default(services)
    assert "agent" in default and "engine" not in default
    assert services["engine"]["profiles"] == ["static-engine"]


def test_the_agent_runs_run_agent_on_every_gpu_and_drains_within_its_grace_period(services):
    from django.core.management import load_command_class

    from controlplane.launcher.node_agent import ENGINE_KILL_MARGIN_S

    agent = services["agent"]
    command = [arg.replace("${AGENT_NAME:-gpu-host-1}", "gpu-host-1") for arg in agent["command"]]
    assert command[:3] == ["python", "manage.py", "run_agent"]
    parser = load_command_class("controlplane.launcher", "run_agent").create_parser(
        "manage.py", "run_agent"
    )
    options = parser.parse_args(command[3:])
    assert options.name == "gpu-host-1"
    (gpus,) = agent["deploy"]["resources"]["reservations"]["devices"]
    assert (gpus["driver"], gpus["count"]) == ("nvidia", "all")
    assert "gpu" in gpus["capabilities"]
    grace = agent["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) >= options.drain_timeout + ENGINE_KILL_MARGIN_S


def test_platform_waits_for_its_database_and_redis(services):
    for role in ("web", "agent", "engine", "celery"):
        depends = services[role]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["redis"]["condition"] == "service_healthy"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in services["redis"] and "healthcheck" in services["postgres"]


def _prometheus_job(services) -> dict:
    mounts = {
        target: source for source, target in map(split_mount, services["prometheus"]["volumes"])
    }
    config = yaml.safe_load((DEPLOY / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    return jobs["llm-platform"]


def test_prometheus_scrapes_the_api_metrics(services):
    job = _prometheus_job(services)
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["web:8000"]


def test_prometheus_sends_the_metrics_token_web_checks(services):
    """web reads METRICS_BEARER_TOKEN; Prometheus reads the same variable, through a secret
    mounted where prometheus.yml's credentials_file points."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    authorization = _prometheus_job(services)["authorization"]
    assert authorization["type"] == "Bearer"
    (secret,) = services["prometheus"]["secrets"]
    assert authorization["credentials_file"] == f"/run/secrets/{secret}"
    variable = compose["secrets"][secret]["environment"]
    assert services["web"]["environment"]["METRICS_BEARER_TOKEN"].startswith(f"${{{variable}:?")
    assert platform_reads_metrics_token_from(variable)


def test_grafana_provisions_the_datasource_and_the_dashboard(services):
    sources = {
        target: source for source, target in map(split_mount, services["grafana"]["volumes"])
    }
    provisioning = DEPLOY / sources["/etc/grafana/provisioning"]
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((provisioning / "dashboards" / "platform.yml").read_text())
    dashboards_dir = provider["providers"][0]["options"]["path"]
    assert (DEPLOY / sources[dashboards_dir] / "platform.json").is_file()


def test_one_beat_schedules_the_periodic_tasks(services):
    # Without a beat the usage queue is never flushed and stale batches are never re-queued.
    beats = [name for name, svc in services.items() if "beat" in svc.get("command", [])]
    assert beats == ["beat"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "controlplane", "beat"]


def test_a_batch_worker_takes_the_queue_batch_jobs_are_routed_to(services):
    from django.conf import settings

    queue = settings.CELERY_TASK_ROUTES["batches.run"]["queue"]
    command = services["batch-worker"]["command"]
    assert command[:4] == ["celery", "-A", "controlplane", "worker"]
    assert command[command.index("--queues") + 1] == queue


def test_web_and_the_batch_worker_share_the_files_directory(services):
    def files_volume(role):
        env = services[role]["environment"]
        return [
            split_mount(v)[0]
            for v in services[role]["volumes"]
            if split_mount(v)[1] == env["FILES_DIR"]
        ]

    assert files_volume("web") == files_volume("batch-worker") == ["files"]
