"""Admin for served models. Every write goes through ``controlplane.deployments.services``
(adding validates the checkpoint as ``manage.py load_model`` does), so API processes see it
within a second."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from controlplane.common.admin_rows import adopt_created_row
from controlplane.deployments import selectors, services
from controlplane.deployments.models import ServedModel


class ServedModelAddForm(forms.ModelForm):
    """A name and a checkpoint on the server, validated before anything is saved (a .gguf file
    is converted here, once: a minute or more)."""

    class Meta:
        model = ServedModel
        fields = ["name", "path"]
        help_texts = {
            "path": "A Hugging Face safetensors directory (chat, or completions only without a "
            "chat template), a sentence-transformers directory (embeddings), or a .gguf file."
        }

    def clean(self):
        data = super().clean()
        if data.get("name") and data.get("path"):
            try:
                services.served_model_validate(path=data["path"], name=data["name"])
            except services.ModelRegistrationError as exc:
                raise forms.ValidationError(str(exc)) from exc
        return data


@admin.register(ServedModel)
class ServedModelAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "architecture",
        "parameters",
        "dtype",
        "max_model_len",
        "completions_only",
        "tool_parser",
        "is_active",
    )
    list_filter = ("is_active", "completions_only", "tool_parser", "architecture")
    search_fields = ("name", "path")
    readonly_on_change = (
        "name",
        "path",
        "architecture",
        "dtype",
        "quantization",
        "num_parameters",
        "completions_only",
        "created_at",
        "updated_at",
    )

    @admin.display(description="parameters", ordering="num_parameters")
    def parameters(self, obj: ServedModel) -> str:
        return f"{obj.num_parameters / 1e6:.1f}M"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ServedModelAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["name", "path"]
        return [*self.readonly_on_change, "max_model_len", "tool_parser", "is_active"]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_on_change if obj is not None else ()

    def save_model(self, request, obj, form, change):
        if change:
            # ``obj`` already holds the new values; the service compares with the stored row.
            services.served_model_update(
                model=selectors.served_model_get_by_pk(pk=obj.pk),
                actor=request.user,
                **{field: form.cleaned_data[field] for field in form.changed_data},
            )
            return
        created = services.served_model_register(path=obj.path, name=obj.name)
        adopt_created_row(obj, created)

    def get_deleted_objects(self, objs, request):
        # The confirmation page refuses, as for protected objects, what the service refuses.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        protected = list(protected) + [
            f"tenant {name} (its only granted model is {model.name})"
            for model in objs
            for name in services.tenants_confined_to(model=model)
        ]
        return deleted, counts, perms_needed, protected

    def delete_model(self, request, obj):
        services.served_model_delete(model=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for model in queryset:
            services.served_model_delete(model=model, actor=request.user)
