"""deploy/k8s: each workload has its image, command, configuration, probes and resources."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

import pytest
import yaml

from controlplane.metrics import exported_sample_names
from tests.deploy.metrics_token import platform_reads_metrics_token_from

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
NAMESPACE = "llm-platform"
WORKLOADS = ("web", "engine", "agent", "celery", "celery-beat", "batch-worker", "migrate")
KINDS = {"migrate": ("Job", "llm-platform-migrate"), "agent": ("DaemonSet", "agent")}


def _documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict) and "kind" in doc, f"{path.name}: not a manifest"
            docs.append((path.name, doc))
    return docs


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict]:
    by_kind_name = {}
    for _, doc in _documents():
        if doc["kind"] == "Kustomization":
            continue
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in by_kind_name, f"{key} defined twice"
        by_kind_name[key] = doc
    return by_kind_name


def _pod_spec(manifests, name: str) -> dict:
    return manifests[KINDS.get(name, ("Deployment", name))]["spec"]["template"]["spec"]


def _container(manifests, name: str) -> dict:
    (container,) = _pod_spec(manifests, name)["containers"]
    return container


def test_every_namespaced_object_lives_in_the_platform_namespace(manifests):
    assert ("Namespace", NAMESPACE) in manifests
    for (kind, name), doc in manifests.items():
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, (kind, name)


def test_kustomization_lists_existing_files_and_never_the_example_secret():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource
    assert "secret.example.yaml" not in kustomization["resources"]
    for workload in ("web.yaml", "agent-daemonset.yaml", "celery.yaml", "migrate-job.yaml"):
        assert workload in kustomization["resources"]
    # Engines come from the node agents by default; the static engine Deployment is the
    # alternative, never applied beside them (both would claim the GPUs and run the model).
    assert "engine.yaml" not in kustomization["resources"]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_workloads_take_configuration_from_the_configmap_and_secret(manifests, workload):
    container = _container(manifests, workload)
    assert container["image"].startswith("llm-platform")
    assert container["command"]
    (config,) = container["envFrom"]
    config_name = config["configMapRef"]["name"]
    assert ("ConfigMap", config_name) in manifests
    secret_example = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    env = {e["name"]: e for e in container["env"]}
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret_example["metadata"]["name"]
        assert ref["key"] in secret_example["stringData"]


def test_web_is_served_with_health_liveness_and_ready_readiness(manifests):
    container = _container(manifests, "web")
    assert container["command"][0] == "daphne"
    assert container["command"][-1] == "controlplane.asgi:application"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    endpoint = container["command"][container["command"].index("-e") + 1]
    assert f"tcp:port={port}:" in endpoint and ":backlog=" in endpoint

    service = manifests[("Service", "web")]
    pod_labels = manifests[("Deployment", "web")]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_prometheus_scrapes_web_with_the_token_the_pods_check(manifests):
    (endpoint,) = manifests[("ServiceMonitor", "web")]["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["type"] == "Bearer"
    scraper_ref = endpoint["authorization"]["credentials"]
    env = {e["name"]: e for e in _container(manifests, "web")["env"]}
    assert env["METRICS_BEARER_TOKEN"]["valueFrom"]["secretKeyRef"] == scraper_ref
    assert platform_reads_metrics_token_from("METRICS_BEARER_TOKEN")
    secret_example = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    assert scraper_ref["name"] == secret_example["metadata"]["name"]
    assert scraper_ref["key"] in secret_example["stringData"]

    # The monitor selects the web Service and one of its ports.
    monitor = manifests[("ServiceMonitor", "web")]
    service = manifests[("Service", "web")]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}


def test_web_pods_invite_no_scrape_that_sends_no_token(manifests):
    annotations = manifests[("Deployment", "web")]["spec"]["template"]["metadata"].get(
        "annotations", {}
    )
    assert "prometheus.io/scrape" not in annotations


def test_the_engine_gets_one_gpu_and_probes_its_own_status_record(manifests):
    container = _container(manifests, "engine")
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    command = container["command"]
    assert command[:3] == ["python", "manage.py", "run_engine"]
    assert command[command.index("--engine-id") + 1] == "$(POD_NAME)"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"

    for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
        shell, flag, script = container[probe_name]["exec"]["command"]
        assert (shell, flag) == ("sh", "-c")  # exec probes get no $(VAR) expansion
        argv = shlex.split(script)
        assert argv[:3] == ["python", "-m", "controlplane.metrics.engine_ready"]
        assert argv[argv.index("--engine-id") + 1] == "$POD_NAME"
        assert argv[argv.index("--model") + 1] == "$MODEL_NAME"
        assert ("--allow-draining" in argv) == (probe_name != "readinessProbe")
    assert importlib.util.find_spec("controlplane.metrics.engine_ready") is not None
    # Long enough for the drain the engine does on SIGTERM.
    assert _pod_spec(manifests, "engine")["terminationGracePeriodSeconds"] >= 60


def test_web_and_engines_mount_the_same_checkpoints(manifests):
    def models_claim(workload):
        spec = _pod_spec(manifests, workload)
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        (name,) = [n for n, path in mounts.items() if path == "/models"]
        return volumes[name]["persistentVolumeClaim"]["claimName"]

    claim = models_claim("web")
    assert claim == models_claim("engine") == models_claim("agent")
    assert ("PersistentVolumeClaim", claim) in manifests


def test_celery_runs_a_worker_of_the_platform(manifests):
    container = _container(manifests, "celery")
    assert container["command"][:4] == ["celery", "-A", "controlplane", "worker"]
    assert "livenessProbe" in container


def test_keda_scales_engines_on_an_exported_waiting_metric(manifests):
    scaled = manifests[("ScaledObject", "engine")]
    assert ("Deployment", scaled["spec"]["scaleTargetRef"]["name"]) in manifests
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert "vllm:num_requests_waiting" in trigger["metadata"]["query"]
    assert "vllm:num_requests_waiting" in exported_sample_names()


def test_the_engine_command_line_is_one_run_engine_accepts(manifests):
    """The manifest's arguments parse with the real command's parser ($(VAR) filled in)."""
    from django.core.management import load_command_class

    command = _container(manifests, "engine")["command"]
    argv = [
        arg.replace("$(MODEL_NAME)", "default").replace("$(POD_NAME)", "engine-0")
        for arg in command
    ]
    parser = load_command_class("controlplane.deployments", "run_engine").create_parser(
        "manage.py", "run_engine"
    )
    options = parser.parse_args(argv[3:])
    assert (options.model, options.engine_id) == ("default", "engine-0")


def test_exactly_one_beat_schedules_the_periodic_tasks(manifests):
    beat = manifests[("Deployment", "celery-beat")]
    assert beat["spec"]["replicas"] == 1
    assert _container(manifests, "celery-beat")["command"][:4] == [
        "celery",
        "-A",
        "controlplane",
        "beat",
    ]
    for (kind, name), _doc in manifests.items():
        if kind == "Deployment" and name != "celery-beat":
            assert "beat" not in _container(manifests, name)["command"], name


def test_the_batch_worker_takes_the_batch_queue_and_shares_files_with_web(manifests):
    from django.conf import settings

    command = _container(manifests, "batch-worker")["command"]
    assert (
        command[command.index("--queues") + 1]
        == settings.CELERY_TASK_ROUTES["batches.run"]["queue"]
    )
    config = manifests[("ConfigMap", "llm-platform-config")]["data"]

    def files_claim(workload):
        spec = _pod_spec(manifests, workload)
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        return volumes[mounts[config["FILES_DIR"]]]["persistentVolumeClaim"]["claimName"]

    claim = files_claim("web")
    assert claim == files_claim("batch-worker")
    assert ("PersistentVolumeClaim", claim) in manifests
