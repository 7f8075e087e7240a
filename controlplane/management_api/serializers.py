"""Request and response bodies of the management API. drf-spectacular reads them for the
OpenAPI schema (/api/schema/), so the bounds written here are the ones it documents."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.fleet import selectors
from controlplane.fleet.models import Deployment, Node, Replica
from controlplane.fleet.services import (
    MAX_REPLICAS,
    SETTINGS,
    DeploymentError,
    deployment_validate,
)

# The deployment's integer columns (PositiveIntegerField) hold up to this on every database.
COLUMN_MAX = 2**31 - 1


class EngineSettingsSerializer(serializers.Serializer):
    """The engine settings a deployment may set (fleet.services.SETTINGS); in a request,
    each may be left out (a new deployment: the default; a change: kept as it is)."""

    device = serializers.ChoiceField(["cpu", "cuda", "auto"], required=False)
    dtype = serializers.CharField(
        max_length=20, allow_blank=True, required=False, help_text="'': the model's own."
    )
    quantization = serializers.ChoiceField(
        ["", "int8", "int4"], required=False, help_text="'': the model's setting."
    )
    max_model_len = serializers.IntegerField(
        min_value=1, max_value=COLUMN_MAX, allow_null=True, required=False
    )
    max_num_seqs = serializers.IntegerField(
        min_value=1, max_value=COLUMN_MAX, allow_null=True, required=False
    )
    kv_cache_gb = serializers.FloatField(
        min_value=0.001, required=False, help_text="KV cache per engine, GiB."
    )
    cpu_threads = serializers.IntegerField(
        min_value=1, max_value=COLUMN_MAX, allow_null=True, required=False
    )
    node_selector = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="Labels a node must carry."
    )
    scale_to_zero = serializers.BooleanField(required=False)
    idle_timeout_s = serializers.IntegerField(min_value=0, max_value=COLUMN_MAX, required=False)


class ReplicaSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    state = serializers.ChoiceField(Replica.State.choices)
    node = serializers.CharField(source="node.name", allow_null=True, default=None)
    gpu_index = serializers.IntegerField(
        allow_null=True, help_text="Its GPU on the node (GPU replicas; null on a CPU)."
    )
    engine_id = serializers.CharField()
    generation = serializers.IntegerField(help_text="The deployment generation it runs.")
    restarts = serializers.IntegerField()
    reason = serializers.CharField()
    log_tail = serializers.CharField()
    updated_at = serializers.DateTimeField()


class DeploymentSerializer(EngineSettingsSerializer):
    """A deployment as it is: what it asks for, and its replicas' live states (stopped
    replicas, which are history, left out)."""

    name = serializers.CharField()
    model = serializers.CharField(source="served_model.name")
    replicas = serializers.IntegerField(help_text="Engines wanted.")
    stopped_replicas = serializers.IntegerField(
        allow_null=True, help_text="Set while stopped: what POST .../start brings back."
    )
    generation = serializers.IntegerField(
        help_text="Bumped by new engine settings or a restart; replicas of an older one are "
        "being rolled onto it."
    )
    ready_replicas = serializers.SerializerMethodField()
    replica_states = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def _live(self, obj: Deployment) -> list[Replica]:
        replicas = selectors.deployment_replica_list(deployment=obj)
        return [r for r in replicas if r.state != Replica.State.STOPPED]

    @extend_schema_field(serializers.IntegerField())
    def get_ready_replicas(self, obj: Deployment) -> int:
        return sum(r.state == Replica.State.READY for r in self._live(obj))

    @extend_schema_field(ReplicaSerializer(many=True))
    def get_replica_states(self, obj: Deployment) -> list[dict]:
        return ReplicaSerializer(self._live(obj), many=True).data


class _RefusesUnknownFields(EngineSettingsSerializer):
    """DRF drops fields it does not know; here a misspelt setting is a 400 naming it, not a
    deployment silently made without it. (A subclass of the settings: the fields it knows.)"""

    def validate(self, data):
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({unknown[0]: "unknown setting"})
        return data


class DeploymentCreateSerializer(_RefusesUnknownFields):
    name = serializers.CharField(max_length=200)
    model = serializers.CharField(
        required=False, help_text="A registered served model; default: the deployment's name."
    )
    replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, default=1)

    def validate(self, data):
        data = super().validate(data)
        settings = {name: data[name] for name in SETTINGS if name in data}
        try:  # the service's own rules (a known generation model), before anything is written
            deployment_validate(
                name=data["name"], model=data.get("model"), replicas=data["replicas"], **settings
            )
        except DeploymentError as exc:
            raise serializers.ValidationError({"model": str(exc)}) from exc
        return data


class DeploymentUpdateSerializer(_RefusesUnknownFields):
    """What to change; fields left out keep their value. New settings restart the engines;
    a new ``replicas`` alone scales."""

    model = serializers.CharField(required=False)
    replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)


class ScaleSerializer(serializers.Serializer):
    replicas = serializers.IntegerField(
        min_value=0, max_value=MAX_REPLICAS, help_text="Engines wanted (0 stops all)."
    )


class DeletedSerializer(serializers.Serializer):
    name = serializers.CharField()
    object = serializers.CharField(default="deployment.deleted")
    deleted = serializers.BooleanField(default=True)


class NodeReplicaSerializer(serializers.Serializer):
    deployment = serializers.CharField(source="deployment.name")
    state = serializers.ChoiceField(Replica.State.choices)
    gpu_index = serializers.IntegerField(allow_null=True, help_text="Its GPU on this node.")
    engine_id = serializers.CharField()


class NodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    address = serializers.CharField()
    state = serializers.ChoiceField(Node.State.choices)
    live = serializers.SerializerMethodField(
        help_text="Its heartbeat is in Redis now (null: Redis unreachable)."
    )
    num_cpus = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    gpus = serializers.ListField(child=serializers.DictField())
    labels = serializers.DictField(child=serializers.CharField())
    last_heartbeat = serializers.DateTimeField(allow_null=True)
    replicas = serializers.SerializerMethodField(help_text="What runs on it now.")

    @extend_schema_field(serializers.BooleanField(allow_null=True))
    def get_live(self, obj: Node) -> bool | None:
        return selectors.node_live(name=obj.name)

    @extend_schema_field(NodeReplicaSerializer(many=True))
    def get_replicas(self, obj: Node) -> list[dict]:
        return NodeReplicaSerializer(selectors.node_replicas(node=obj), many=True).data


def list_of(serializer: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """OpenAI's list shape, ``{"object": "list", "data": [...]}``, for the schema."""
    return type(
        f"{serializer.__name__.removesuffix('Serializer')}ListSerializer",
        (serializers.Serializer,),
        {"object": serializers.CharField(default="list"), "data": serializer(many=True)},
    )
