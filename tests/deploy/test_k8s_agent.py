"""deploy/k8s/agent-daemonset.yaml: the node agent on every GPU node runs the command the
platform has, with the same configuration as web, the node's name, its GPUs, and time to
drain its engines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import load_command_class

from controlplane.launcher.node_agent import ENGINE_KILL_MARGIN_S

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"


@pytest.fixture(scope="module")
def daemonset() -> dict:
    (doc,) = yaml.safe_load_all((K8S / "agent-daemonset.yaml").read_text())
    assert doc["kind"] == "DaemonSet"
    return doc


def _pod(doc) -> dict:
    return doc["spec"]["template"]["spec"]


def _container(doc) -> dict:
    (container,) = _pod(doc)["containers"]
    return container


def _env(container) -> dict:
    return {e["name"]: e for e in container["env"]}


def _parsed_command(container):
    """The command line as run_agent's own parser reads it ($(VAR)s filled in)."""
    command = container["command"]
    assert command[:3] == ["python", "manage.py", "run_agent"]
    filled = {"$(NODE_NAME)": "gpu-node-7", "$(AGENT_MEMORY_GB)": "503"}
    argv = [filled.get(arg, arg) for arg in command[3:]]
    parser = load_command_class("controlplane.launcher", "run_agent").create_parser(
        "manage.py", "run_agent"
    )
    return parser.parse_args(argv)


def test_the_daemonset_runs_run_agent_named_after_its_node(daemonset):
    container = _container(daemonset)
    options = _parsed_command(container)
    assert options.name == "gpu-node-7"
    env = _env(container)
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The memory offered is the container's budget (node allocatable without a limit).
    memory = env["AGENT_MEMORY_GB"]["valueFrom"]["resourceFieldRef"]
    assert (memory["containerName"], memory["resource"]) == (container["name"], "limits.memory")
    assert memory["divisor"] == "1Gi" and options.memory_gb == 503
    assert "memory" not in container["resources"].get("limits", {})


def test_the_agent_gets_database_and_redis_from_the_same_config_as_web():
    web = yaml.safe_load((K8S / "web.yaml").read_text().split("\n---\n")[0])
    (web_container,) = web["spec"]["template"]["spec"]["containers"]
    (doc,) = yaml.safe_load_all((K8S / "agent-daemonset.yaml").read_text())
    agent = _container(doc)
    assert agent["envFrom"] == web_container["envFrom"]
    assert agent["image"] == web_container["image"]
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"):
        assert _env(agent)[name]["valueFrom"] == _env(web_container)[name]["valueFrom"]


def test_the_agent_runs_on_gpu_nodes_and_sees_their_gpus(daemonset):
    pod, container = _pod(daemonset), _container(daemonset)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    env = _env(container)
    # Every GPU of the node through the NVIDIA runtime, or a count from the device plugin.
    runtime_all = (
        pod.get("runtimeClassName") == "nvidia" and env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    )
    requested = container["resources"].get("limits", {}).get("nvidia.com/gpu")
    assert runtime_all or requested
    # nvidia-smi (the agent's source of GPUs) needs the utility capability.
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]["value"].split(",")


def test_the_agent_drains_its_engines_within_its_grace_period(daemonset):
    options = _parsed_command(_container(daemonset))
    # The agent kills what still runs at drain timeout + the margin; it then records the
    # node gone and exits, which takes a few seconds more.
    needed = options.drain_timeout + ENGINE_KILL_MARGIN_S + 10
    assert _pod(daemonset)["terminationGracePeriodSeconds"] >= needed


def test_engine_logs_and_shared_memory_have_volumes(daemonset):
    pod, container = _pod(daemonset), _container(daemonset)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert mounts["/dev/shm"]["emptyDir"]["medium"] == "Memory"
    assert "emptyDir" in mounts["/var/lib/llm-platform"]  # the image's PLATFORM_VAR_DIR
    assert "PLATFORM_VAR_DIR=/var/lib/llm-platform" in (K8S.parent / "Dockerfile").read_text()
