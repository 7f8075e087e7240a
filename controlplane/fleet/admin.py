"""Admin for the engine fleet: Deployments (deploy, scale, stop, start, restart, edit settings, and each
replica's live state) and Nodes (resources, liveness, what runs where).

Every write goes through ``controlplane.fleet.services`` with the signed-in user as the
audited actor, as ``manage.py deploy``/``scale``/``undeploy`` and the REST API do; the node
agents' reconciler turns the new numbers into engines. Reads go through the selectors.
"""

from __future__ import annotations

from collections import Counter

from django import forms
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from controlplane.common.admin_rows import adopt_created_row
from controlplane.deployments.selectors import served_models_by_name
from controlplane.fleet import selectors, services
from controlplane.fleet.models import ACTIVE_STATES, Deployment, Node, Replica
from controlplane.fleet.placement import GIB
from controlplane.fleet.services import SETTINGS, DeploymentError


class DeploymentForm(forms.ModelForm):
    """The deployment's model, replicas and engine settings, checked by the service's own
    rules before anything is saved, so a refusal is a form error rather than a server error."""

    class Meta:
        model = Deployment
        fields = ["name", "served_model", "replicas", *SETTINGS]
        labels = {"served_model": "Model"}
        help_texts = {
            "served_model": "A registered model (manage.py load_model, or Served models).",
            "node_selector": 'Labels a node must carry, e.g. {"zone": "a"}; {} for any node.',
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "served_model" in self.fields:
            self.fields["served_model"].queryset = served_models_by_name()

    def clean_node_selector(self):
        return self.cleaned_data.get("node_selector") or {}  # left empty: any node

    def clean(self):
        data = super().clean()
        if self.errors:
            return data  # the service would refuse the same fields again, less clearly
        name = data.get("name") or self.instance.name
        try:
            services.deployment_validate(
                name=name,
                model=data["served_model"].name,
                replicas=data["replicas"],
                **settings_of(data),
            )
        except DeploymentError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


def settings_of(data: dict) -> dict:
    return {name: data[name] for name in SETTINGS if name in data}


class ReplicaInline(admin.TabularInline):
    """Each replica of the deployment, newest first: where it runs and how it is doing."""

    model = Replica
    fk_name = "deployment"
    fields = ("state", "node", "gpu_index", "engine_id", "restarts", "reason", "log", "updated_at")
    readonly_fields = fields
    ordering = ("-pk",)
    extra = 0
    can_delete = False
    verbose_name_plural = "replicas (live state, written by the node agents)"

    @admin.display(description="log tail")
    def log(self, obj: Replica):
        return format_html('<pre class="log-tail">{}</pre>', obj.log_tail) if obj.log_tail else "-"

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # the reconciler creates replicas from the deployment's count


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    form = DeploymentForm
    list_display = ("name", "model", "replicas", "ready", "states", "device", "updated_at")
    list_filter = ("device", "served_model")
    search_fields = ("name", "served_model__name")
    list_select_related = ("served_model",)
    actions = ["stop", "start", "restart", "deploy_again"]
    inlines = [ReplicaInline]
    fieldsets = (
        (None, {"fields": ("name", "served_model", "replicas", "stopped")}),
        (
            "Engine settings (saving them restarts the engines)",
            {"fields": SETTINGS[:-2]},
        ),
        ("Scale to zero", {"fields": SETTINGS[-2:]}),
    )

    @admin.display(description="model", ordering="served_model__name")
    def model(self, obj: Deployment) -> str:
        # Text, not the foreign key: Django keeps a key's cell on one line, and a model name
        # ("org/model-name-...") may be longer than the window.
        return obj.served_model.name

    @admin.display(description="ready")
    def ready(self, obj: Deployment) -> str:
        replicas = selectors.deployment_replica_list(deployment=obj)
        return f"{sum(r.state == Replica.State.READY for r in replicas)}/{obj.replicas}"

    @admin.display(description="replica states")
    def states(self, obj: Deployment) -> str:
        replicas = selectors.deployment_replica_list(deployment=obj)
        counts: dict[str, int] = {}
        for replica in replicas:
            if replica.state != Replica.State.STOPPED:  # history, not state
                counts[replica.state] = counts.get(replica.state, 0) + 1
        return ", ".join(f"{count} {state}" for state, count in counts.items()) or "-"

    @admin.display(description="stopped")
    def stopped(self, obj: Deployment) -> str:
        if obj.stopped_replicas:
            return f"yes: Start brings back {obj.stopped_replicas} replica(s)"
        return "no"

    def get_readonly_fields(self, request, obj=None):
        return ("name", "stopped") if obj is not None else ("stopped",)

    def changelist_view(self, request, extra_context=None):
        # Models registered but run by no deployment, each with a link to the add form filled
        # in for it (templates/admin/fleet/deployment/change_list.html).
        add = reverse("admin:fleet_deployment_add")
        undeployed = [
            (model.name, f"{add}?{urlencode({'name': model.name, 'served_model': model.pk})}")
            for model in selectors.served_models_undeployed()
        ]
        context = {**(extra_context or {}), "undeployed": undeployed}
        return super().changelist_view(request, context)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:  # the service tells a scale from new settings (which restart engines)
            services.deployment_update(
                name=obj.name,
                model=data["served_model"].name,
                replicas=data["replicas"],
                actor=request.user,
                **settings_of(data),
            )
            return
        deployed = services.deployment_deploy(
            name=obj.name,
            model=data["served_model"].name,
            replicas=data["replicas"],
            actor=request.user,
            **settings_of(data),
        )
        adopt_created_row(obj, deployed)

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []  # a new deployment has no replicas yet

    def delete_model(self, request, obj):
        services.deployment_undeploy(name=obj.name, actor=request.user)

    def delete_queryset(self, request, queryset):
        for deployment in queryset:
            services.deployment_undeploy(name=deployment.name, actor=request.user)

    def _each(self, request, queryset, write, done: str) -> None:
        names, refused = [], []
        for deployment in queryset:
            try:
                write(name=deployment.name, actor=request.user)
                names.append(deployment.name)
            except DeploymentError as exc:
                refused.append(str(exc))
        if names:
            self.message_user(request, f"{done}: {', '.join(names)}.", messages.SUCCESS)
        for reason in refused:
            self.message_user(request, reason, messages.ERROR)

    @admin.action(description="Stop (replicas to 0; Start brings them back)")
    def stop(self, request, queryset):
        self._each(request, queryset, services.deployment_stop, "Stopped")

    @admin.action(description="Start (back to the replicas running when stopped)")
    def start(self, request, queryset):
        self._each(request, queryset, services.deployment_start, "Started")

    @admin.action(description="Restart (rolling: each replica replaced by a ready new one)")
    def restart(self, request, queryset):
        self._each(
            request, queryset, services.deployment_restart, "Restarting, one replica at a time"
        )

    @admin.action(description="Deploy again (retry failed replicas)")
    def deploy_again(self, request, queryset):
        self._each(request, queryset, services.deployment_deploy_again, "Deployed again")


class NodeReplicaInline(admin.TabularInline):
    """What runs on the node now: its replicas with an engine to run or stop."""

    model = Replica
    fk_name = "node"
    fields = ("deployment", "state", "gpu_index", "engine_id", "restarts", "reason", "updated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "replicas running here"

    def get_queryset(self, request):
        return super().get_queryset(request).filter(state__in=ACTIVE_STATES)

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """Read-only: node agents register and update their nodes."""

    list_display = (
        "name",
        "state",
        "live",
        "num_cpus",
        "memory",
        "gpu_list",
        "label_list",
        "last_heartbeat",
        "runs",
    )
    list_filter = ("state",)
    search_fields = ("name", "address")
    fields = (
        "name",
        "address",
        "state",
        "live",
        "num_cpus",
        "memory",
        "gpu_list",
        "label_list",
        "last_heartbeat",
        "registered_at",
    )
    readonly_fields = fields
    inlines = [NodeReplicaInline]

    @admin.display(description="live now")
    def live(self, obj: Node) -> str:
        """Its heartbeat key in Redis, which placement trusts (``last_heartbeat`` is what the
        database last heard)."""
        live = selectors.node_live(name=obj.name)
        return "unknown (Redis unreachable)" if live is None else ("yes" if live else "no")

    @admin.display(description="memory", ordering="memory_bytes")
    def memory(self, obj: Node) -> str:
        return f"{obj.memory_bytes / GIB:.1f} GiB"

    @admin.display(description="GPUs")
    def gpu_list(self, obj: Node) -> str:
        # Alike GPUs counted once: "8 x NVIDIA H100 (80 GiB)" rather than eight entries.
        kinds = Counter(
            f"{g.get('name', 'GPU')} ({int(g.get('memory_bytes', 0)) / GIB:.0f} GiB)"
            for g in obj.gpus or []
        )
        return ", ".join(f"{n} x {kind}" if n > 1 else kind for kind, n in kinds.items()) or "none"

    @admin.display(description="labels")
    def label_list(self, obj: Node) -> str:
        return ", ".join(f"{k}={v}" for k, v in (obj.labels or {}).items()) or "-"

    @admin.display(description="runs")
    def runs(self, obj: Node) -> str:
        replicas = selectors.node_replicas(node=obj)
        return ", ".join(f"{r.deployment.name} ({r.state})" for r in replicas) or "-"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # an agent that starts again re-registers it; gone nodes stay listed
