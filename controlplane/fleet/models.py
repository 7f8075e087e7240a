"""The engine fleet's declared and observed state: Deployments (what should run), Nodes (the
hosts a node agent runs on) and Replicas (one engine process each, placed on a node).

Who writes what: the services (``services.py``) write Deployments; node agents write their
Node and the state of the replicas placed on them; the reconciler (``reconciler.py``) creates,
places and retires replicas.
"""

from __future__ import annotations

from django.db import models

from controlplane.deployments.models import ServedModel


class Deployment(models.Model):
    """A served model run by ``replicas`` engines with these engine settings."""

    name = models.CharField(max_length=200, unique=True)
    served_model = models.ForeignKey(
        ServedModel, on_delete=models.PROTECT, related_name="fleet_deployments"
    )
    replicas = models.PositiveIntegerField(default=1, help_text="Engines wanted (0 allowed).")
    # Set while stopped (replicas 0 by ``deployment_stop``): the count ``deployment_start``
    # brings back. None: running, or scaled to 0 by hand (then start has nothing to restore).
    stopped_replicas = models.PositiveIntegerField(null=True, blank=True, editable=False)
    device = models.CharField(
        max_length=8, default="cpu", choices=[("cpu", "CPU"), ("cuda", "GPU"), ("auto", "Auto")]
    )
    dtype = models.CharField(max_length=20, blank=True, default="", help_text="'': the model's.")
    quantization = models.CharField(
        max_length=8,
        blank=True,
        default="",
        choices=[("", "The model's setting"), ("int8", "int8"), ("int4", "int4")],
    )
    max_model_len = models.PositiveIntegerField(null=True, blank=True)
    max_num_seqs = models.PositiveIntegerField(null=True, blank=True)
    kv_cache_gb = models.FloatField(default=1.0, help_text="KV cache size per engine, GiB.")
    cpu_threads = models.PositiveIntegerField(null=True, blank=True)
    node_selector = models.JSONField(
        default=dict, blank=True, help_text="Labels a node must carry, e.g. {'zone': 'a'}."
    )
    scale_to_zero = models.BooleanField(default=False)
    idle_timeout_s = models.PositiveIntegerField(default=600)
    generation = models.PositiveIntegerField(
        default=1,
        help_text="Bumped by a settings change or a restart; replicas of an older one are "
        "rolled (fleet/rollout.py).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A host running one node agent (``manage.py run_agent``). Live while its heartbeat key is
    in Redis (``fleet/liveness.py``); ``last_heartbeat`` is what the database last heard."""

    class State(models.TextChoices):
        READY = "ready"
        GONE = "gone"  # its agent stopped cleanly
        LOST = "lost"  # its heartbeat expired

    name = models.CharField(max_length=200, unique=True)
    address = models.CharField(max_length=200, blank=True, default="")
    num_cpus = models.PositiveIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    gpus = models.JSONField(default=list, blank=True, help_text="[{name, memory_bytes}, ...]")
    labels = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.READY)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Replica(models.Model):
    """One engine of a deployment. ``engine_id`` names the engine process of the current
    attempt (a restart gets a new one, so the dead attempt's requests are reaped as any dead
    engine's are)."""

    class State(models.TextChoices):
        PENDING = "pending"  # wanted; placed on ``node`` unless no node fits
        STARTING = "starting"  # its agent is starting it (or waiting out a restart back-off)
        LOADING = "loading"  # the process runs; no status record yet
        READY = "ready"  # its status record is live
        DRAINING = "draining"  # told to stop; drains its requests
        FAILED = "failed"  # crashed too often; ``reason`` and ``log_tail`` say why
        STOPPED = "stopped"
        LOST = "lost"  # its node stopped heartbeating

    deployment = models.ForeignKey(
        Deployment, on_delete=models.CASCADE, related_name="replicas_set"
    )
    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="replicas"
    )
    engine_id = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    reason = models.TextField(blank=True, default="")
    log_tail = models.TextField(blank=True, default="")
    restarts = models.PositiveIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0, help_text="The estimate it was placed by.")
    # Which of its node's GPUs (index into Node.gpus, nvidia-smi's order) a GPU replica runs
    # on: placement counts its memory there, and the agent pins its engine to it. None on a
    # CPU, and on GPU replicas placed before pinning existed (they run unpinned).
    gpu_index = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Its GPU on the node (CUDA_VISIBLE_DEVICES)."
    )
    generation = models.PositiveIntegerField(
        default=1, help_text="The deployment's generation (settings) it was created for."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["deployment", "pk"]

    def __str__(self) -> str:
        return f"{self.deployment.name}#{self.pk}"


# Replicas that hold a slot of their deployment and memory on their node.
RUNNING_STATES = (
    Replica.State.PENDING,
    Replica.State.STARTING,
    Replica.State.LOADING,
    Replica.State.READY,
)
# ... and the ones an agent still has a process for.
ACTIVE_STATES = (*RUNNING_STATES, Replica.State.DRAINING)
