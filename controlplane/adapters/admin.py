"""Admin for LoRA adapters: upload files or a zip (or register a server path; the same name
again updates the adapter), see the validation state and reason and whether live engines
serve it, grant to tenants, validate again, delete. Every write goes through
``controlplane.adapters.services``.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from controlplane.adapters import services, serving
from controlplane.adapters.models import Adapter
from controlplane.common.admin_rows import adopt_created_row
from controlplane.deployments.selectors import generation_model_ids

NO_TENANT_WARNING = (
    "{name} is granted to no tenant, so no API key can call it yet; staff can try it in the "
    "playground. Grant it to tenants here, under Tenants."
)


class AdapterAddForm(forms.ModelForm):
    """Name, base model, grants, and the adapter itself in one of three ways."""

    config_file = forms.FileField(
        required=False, label="adapter_config.json", help_text="With the weights file below."
    )
    weights_file = forms.FileField(required=False, label="adapter_model.safetensors")
    archive = forms.FileField(
        required=False,
        label="or a zip",
        help_text="A zip holding both files (at its root or in one folder).",
    )
    server_path = forms.CharField(
        required=False,
        label="or a path on the server",
        help_text="A directory the platform can read; its files stay where they are.",
    )

    class Meta:
        model = Adapter
        fields = ["name", "base_model", "tenants"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # LoRA adapters apply to generation models; an embeddings model is no base.
        base = self.fields["base_model"]
        base.queryset = base.queryset.filter(pk__in=generation_model_ids())

    # The staff user adding it (AdapterAdmin.get_form), the audited actor.
    actor = None

    def clean(self):
        data = super().clean()
        files = data.get("config_file"), data.get("weights_file")
        given = [
            any(files),
            bool(data.get("archive")),
            bool((data.get("server_path") or "").strip()),
        ]
        if sum(given) != 1:
            raise forms.ValidationError(
                "Give the adapter one way: both files, a zip, or a path on the server."
            )
        if any(files) and not all(files):
            raise forms.ValidationError("Upload both adapter_config.json and the weights file.")
        if data.get("name") and data.get("base_model"):
            try:
                services.adapter_registration_check(name=data["name"], base=data["base_model"])
            except ValidationError as exc:
                self.add_error("name", exc)
        if not self.errors:
            self._register(data)
        return data

    def _register(self, data: dict) -> None:
        """Register it now, inside the admin's transaction: what the services refuse (a path
        that is no directory, an unreadable zip, a missing file) becomes an error on the form.
        In save_model it would be a server error page."""
        common = dict(
            name=data["name"],
            base=data["base_model"],
            tenants=list(data.get("tenants") or ()),
            actor=self.actor,
        )
        path = (data.get("server_path") or "").strip()
        try:
            if path:
                self.registered = services.adapter_register(path=path, **common)
            elif data.get("archive"):
                self.registered = services.adapter_upload(archive=data["archive"], **common)
            else:
                files = [data["config_file"], data["weights_file"]]
                self.registered = services.adapter_upload(files=files, **common)
        except ValidationError as exc:
            self.add_error("server_path" if path else None, exc)

    def validate_unique(self):
        """An existing name is a re-registration (adapter_registration_check decides)."""


class AdapterChangeForm(forms.ModelForm):
    class Meta:
        model = Adapter
        fields = ["tenants"]


@admin.register(Adapter)
class AdapterAdmin(admin.ModelAdmin):
    list_display = ("name", "base_model", "status", "short_reason", "rank", "created_at")
    list_filter = ("state", "base_model")
    search_fields = ("name",)
    filter_horizontal = ("tenants",)
    # Django's delete_selected confirms, then calls delete_queryset (adapter_delete each).
    actions = ["validate_again"]
    readonly_on_change = (
        "name",
        "base_model",
        "status",
        "failure_reason",
        "path",
        "checksum",
        "rank",
        "lora_alpha",
        "target_modules",
        "validated_at",
        "created_at",
        "updated_at",
    )

    @admin.display(description="status", ordering="state")
    def status(self, obj: Adapter) -> str:
        """The validation state; for a validated adapter, whether live engines serve it."""
        if not obj.is_ready:
            return obj.get_state_display()
        count = serving.engines_serving(
            model=obj.base_model.name, name=obj.name, checksum=obj.checksum
        )
        if count:
            return f"ready: serving on {count} engine{'s' if count > 1 else ''}"
        return "validated; not loaded by any live engine yet"

    @admin.display(description="failure reason")
    def short_reason(self, obj: Adapter) -> str:
        return obj.failure_reason[:120]

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = AdapterChangeForm if obj is not None else AdapterAddForm
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is None:  # a class made for this request: the add form registers as this user
            form.actor = request.user
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return [
                "name",
                "base_model",
                "config_file",
                "weights_file",
                "archive",
                "server_path",
                "tenants",
            ]
        return [*self.readonly_on_change, "tenants"]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_on_change if obj is not None else ()

    def save_model(self, request, obj, form, change):
        if change:
            return  # only grants change, in save_related
        adopt_created_row(obj, form.registered)  # registered by the form's clean

    def save_related(self, request, form, formsets, change):
        tenants = form.cleaned_data.get("tenants") or ()
        if change:  # on add, the upload service granted them
            services.adapter_set_tenants(adapter=form.instance, tenants=tenants, actor=request.user)
        if not tenants:
            self.message_user(
                request, NO_TENANT_WARNING.format(name=form.instance.name), messages.WARNING
            )

    def delete_model(self, request, obj):
        services.adapter_delete(adapter=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for adapter in queryset:
            services.adapter_delete(adapter=adapter, actor=request.user)

    @admin.action(description="Validate selected adapters again")
    def validate_again(self, request, queryset: QuerySet[Adapter]):
        for adapter in queryset:
            services.adapter_request_validation(adapter=adapter)
        self.message_user(request, f"Queued validation of {queryset.count()} adapter(s).")
