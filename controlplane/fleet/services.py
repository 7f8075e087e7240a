"""Writes on deployments: deploy, scale, undeploy. Each leaves an audit event naming who did
it; the reconciler (``reconciler.py``) turns the new numbers into placed replicas, and node
agents into engine processes."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from controlplane.audit.services import audit_record
from controlplane.deployments.models import ServedModel
from controlplane.deployments.selectors import served_model_get
from controlplane.fleet.models import Deployment, Replica

# Engine settings a deployment may set (the rest of Deployment is who and how many).
# More engines than any fleet of one model here runs: a typo (10000 for 10) would otherwise
# have the reconciler place replica after replica.
MAX_REPLICAS = 1024
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
    if not 0 <= replicas <= MAX_REPLICAS:
        raise DeploymentError(f"replicas must be 0 to {MAX_REPLICAS}, got {replicas}")
    return replicas


def deployment_validate(
    *, name: str, replicas: int, model: str | None = None, **settings: Any
) -> ServedModel:
    """What ``deployment_deploy`` refuses, without writing anything (the admin's form and the
    REST API's serializer show it as a field error): the served model to deploy."""
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise DeploymentError(f"unknown deployment settings: {', '.join(sorted(unknown))}")
    _replicas_checked(replicas)
    selector = settings.get("node_selector", {})
    if not isinstance(selector, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):  # placement compares it with node labels, which are text
        raise DeploymentError('node_selector must map label names to text, e.g. {"zone": "a"}')
    if settings.get("kv_cache_gb") is not None and not settings["kv_cache_gb"] > 0:
        raise DeploymentError(f"kv_cache_gb must be more than 0, got {settings['kv_cache_gb']}")
    served = served_model_get(name=model or name)
    if served is None:
        raise DeploymentError(f"no served model named {model or name!r}; load_model it first")
    if not served.is_ready:
        raise DeploymentError(f"{served.name} is {served.state}, not ready: it cannot be deployed")
    if served.is_embedding and settings.get("quantization"):
        raise DeploymentError(
            f"{served.name} is an embeddings model: quantization applies to generation models"
        )
    return served


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
    served = deployment_validate(name=name, replicas=replicas, model=model, **settings)
    fields = {"served_model": served, "replicas": replicas, **settings}
    if replicas:  # a count given: nothing left for ``deployment_start`` to restore
        fields["stopped_replicas"] = None
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
    """The deployment, its row locked to the end of the caller's transaction (where there is
    one): a concurrent delete then waits, rather than leaving the caller's save nothing to
    update (SQLite's IMMEDIATE transactions serialize writers anyway; PostgreSQL's do not)."""
    found = Deployment.objects.filter(name=name)
    if transaction.get_connection().in_atomic_block:
        found = found.select_for_update()
    deployment = found.first()
    if deployment is None:
        raise DeploymentError(f"no deployment named {name!r}")
    return deployment


@transaction.atomic
def deployment_update(
    *,
    name: str,
    replicas: int | None = None,
    model: str | None = None,
    actor: Any = None,
    actor_label: str | None = None,
    **settings: Any,
) -> Deployment:
    """Change what is given of an existing deployment (None: keep it). New settings or a new
    model are a deploy (its engines restart with them); a new count alone is a scale, which
    leaves the running engines alone; nothing new writes nothing."""
    deployment = _existing(name)
    current = {setting: getattr(deployment, setting) for setting in SETTINGS}
    wanted = {**current, **settings}
    model = model or deployment.served_model.name
    if wanted != current or model != deployment.served_model.name:
        replicas = deployment.replicas if replicas is None else replicas
        who = {"actor": actor, "actor_label": actor_label}
        return deployment_deploy(name=name, replicas=replicas, model=model, **who, **wanted)
    if replicas is not None and replicas != deployment.replicas:
        return deployment_scale(name=name, replicas=replicas, actor=actor, actor_label=actor_label)
    return deployment


@transaction.atomic
def deployment_scale(
    *, name: str, replicas: int, actor: Any = None, actor_label: str | None = None
) -> Deployment:
    deployment = _existing(name)
    before = deployment.replicas
    deployment.replicas = _replicas_checked(replicas)
    deployment.stopped_replicas = None  # an explicit count replaces the one a stop kept
    deployment.save(update_fields=["replicas", "stopped_replicas", "updated_at"])
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
def deployment_stop(*, name: str, actor: Any = None, actor_label: str | None = None) -> Deployment:
    """Replicas to 0, remembering how many ran so that ``deployment_start`` brings them back.
    Stopping a stopped deployment changes nothing (and keeps the remembered count)."""
    deployment = _existing(name)
    if deployment.replicas == 0:
        return deployment
    before = deployment.replicas
    deployment.stopped_replicas, deployment.replicas = before, 0
    deployment.save(update_fields=["replicas", "stopped_replicas", "updated_at"])
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="deployment.stop",
        target=deployment,
        details={"replicas": [before, 0]},
    )
    return deployment


@transaction.atomic
def deployment_start(*, name: str, actor: Any = None, actor_label: str | None = None) -> Deployment:
    """Back to the replicas a ``deployment_stop`` remembered. A deployment that was not
    stopped that way is refused (scale it instead): a start must not guess a count."""
    deployment = _existing(name)
    if deployment.replicas:
        return deployment
    if not deployment.stopped_replicas:
        raise DeploymentError(f"{name} was not stopped; scale it to the replicas you want")
    after = deployment.stopped_replicas
    deployment.replicas, deployment.stopped_replicas = after, None
    deployment.save(update_fields=["replicas", "stopped_replicas", "updated_at"])
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="deployment.start",
        target=deployment,
        details={"replicas": [0, after]},
    )
    return deployment


def deployment_deploy_again(
    *, name: str, actor: Any = None, actor_label: str | None = None
) -> Deployment:
    """Deploy ``name`` again as it is: its failed replicas are retired and tried afresh."""
    deployment = _existing(name)
    settings = {setting: getattr(deployment, setting) for setting in SETTINGS}
    return deployment_deploy(
        name=name,
        model=deployment.served_model.name,
        replicas=deployment.replicas,
        actor=actor,
        actor_label=actor_label,
        **settings,
    )


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
