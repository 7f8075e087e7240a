"""Writes on deployments: deploy, scale, undeploy. Each leaves an audit event naming who did
it; the reconciler (``reconciler.py``) turns the new numbers into placed replicas, and node
agents into engine processes."""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.db import transaction

from controlplane.audit.services import audit_record
from controlplane.deployments.selectors import served_model_get
from controlplane.fleet.models import Deployment, Replica

# Engine settings a deployment may set (the rest of Deployment is who and how many).
SETTINGS = (
    "device",
    "dtype",
    "quantization",
    "max_model_len",
    "max_num_seqs",
    "kv_cache_gb",
    "cpu_threads",
    "node_selector",
    "scale_to_zero",
    "idle_timeout_s",
)


# A change to any of these starts a new generation: running replicas are rolled onto it
# (``rollout.py``). Scale-to-zero and idle settings change no engine, so they roll nothing.
ROLLING_SETTINGS = (
    *("device", "dtype", "quantization", "max_model_len", "max_num_seqs", "kv_cache_gb"),
    *("cpu_threads", "node_selector", "served_model_id"),
)


class DeploymentError(ValueError):
    """A deploy, scale or undeploy that cannot be done; the message says why."""


def _replicas_checked(replicas: int) -> int:
    if replicas < 0:
        raise DeploymentError(f"replicas must be 0 or more, got {replicas}")
    return replicas


@transaction.atomic
def deployment_deploy(
    *,
    name: str,
    replicas: int,
    model: str | None = None,
    actor: Any = None,
    actor_label: str | None = None,
    **settings: Any,
) -> Deployment:
    """Create or update the deployment ``name`` of served model ``model`` (default: the model
    named ``name``). Deploying again retires its failed replicas, so they are tried afresh."""
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise DeploymentError(f"unknown deployment settings: {', '.join(sorted(unknown))}")
    served = served_model_get(name=model or name)
    if served is None:
        raise DeploymentError(f"no served model named {model or name!r}; load_model it first")
    if not served.is_ready:
        raise DeploymentError(f"{served.name} is {served.state}, not ready: it cannot be deployed")
    if served.is_embedding:
        raise DeploymentError(f"{served.name} is an embeddings model; the fleet runs generation")
    fields = {"served_model": served, "replicas": _replicas_checked(replicas), **settings}
    before = Deployment.objects.filter(name=name).values(*ROLLING_SETTINGS).first()
    deployment, created = Deployment.objects.update_or_create(name=name, defaults=fields)
    after = {field: getattr(deployment, field) for field in ROLLING_SETTINGS}
    rolled = before is not None and before != after
    if rolled:
        _next_generation(deployment)
    retired = deployment.replicas_set.filter(state=Replica.State.FAILED).update(
        state=Replica.State.STOPPED, reason="retired by a new deploy"
    )
    details = {"model": served.name, "replicas": replicas, **settings, "retired_failed": retired}
    if rolled:
        details["generation"] = deployment.generation
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="deployment.create" if created else "deployment.deploy",
        target=deployment,
        details=details,
    )
    return deployment


def _next_generation(deployment: Deployment) -> None:
    deployment.generation += 1
    deployment.save(update_fields=["generation", "updated_at"])


def _existing(name: str) -> Deployment:
    deployment = Deployment.objects.filter(name=name).first()
    if deployment is None:
        raise DeploymentError(f"no deployment named {name!r}")
    return deployment


@transaction.atomic
def deployment_scale(
    *, name: str, replicas: int, actor: Any = None, actor_label: str | None = None
) -> Deployment:
    deployment = _existing(name)
    before = deployment.replicas
    deployment.replicas = _replicas_checked(replicas)
    deployment.save(update_fields=["replicas", "updated_at"])
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="deployment.scale",
        target=deployment,
        details={"replicas": [before, replicas]},
    )
    return deployment


@transaction.atomic
def deployment_restart(
    *, name: str, actor: Any = None, actor_label: str | None = None
) -> Deployment:
    """Restart every replica with the same settings, one at a time (a rolling restart: a new
    replica is started and ready before an old one drains, ``rollout.py``)."""
    deployment = _existing(name)
    _next_generation(deployment)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="deployment.restart",
        target=deployment,
        details={"generation": deployment.generation, "replicas": deployment.replicas},
    )
    return deployment


@transaction.atomic
def deployment_undeploy(*, name: str, actor: Any = None, actor_label: str | None = None) -> None:
    """Delete the deployment and its replica records; agents stop (drain) engines whose
    replica is gone."""
    deployment = _existing(name)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="deployment.undeploy",
        target=deployment,
        details={"replicas": deployment.replicas},
    )
    deployment.delete()


def shell_actor(command: str) -> str:
    """Who ran a management command, for the audit log: ``manage.py deploy (alice)``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (some containers)
        user = f"uid {os.getuid()}"
    return f"manage.py {command} ({user})"
