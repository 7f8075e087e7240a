"""Admin for served models. Every write goes through the services, so API processes see it
within a second. Adding saves the model ``registering`` and returns at once; the Celery worker
downloads, converts and validates it (controlplane/deployments/registration.py) while the
list and the change page show its stage and progress, refreshing until it is ready or failed."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from controlplane.common.admin_rows import adopt_created_row
from controlplane.deployments import registration, selectors, services
from controlplane.deployments.models import ServedModel


class ServedModelAddForm(forms.ModelForm):
    """A name and a checkpoint: only what is quick is checked here (the name, and that the
    checkpoint is a path on the server or a hub id); the rest runs on the Celery worker."""

    class Meta:
        model = ServedModel
        fields = ["name", "path"]
        labels = {"path": "Checkpoint"}
        help_texts = {
            "path": "A path on the server: a Hugging Face safetensors directory (chat, or "
            "completions only without a chat template), a sentence-transformers directory "
            "(embeddings) or a .gguf file (converted once). Or a Hugging Face hub id, "
            "org/name or org/name@revision, downloaded from HF_ENDPOINT with HF_TOKEN."
        }

    def clean(self):
        data = super().clean()
        try:
            if data.get("name"):
                registration.model_name_check(data["name"])
            if data.get("path"):
                registration.checkpoint_source_parse(data["path"])
        except services.ModelRegistrationError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


def registration_status(model: ServedModel) -> str:
    """One line: ready; failed and why; or registering, its stage and how far along."""
    if model.state == ServedModel.State.FAILED:
        reason = model.failure_reason
        # The list stays readable; the change page shows the whole reason.
        return f"failed: {reason if len(reason) <= 200 else reason[:200] + '...'}"
    if model.state == ServedModel.State.READY:
        return "ready"
    line = f"registering: {model.stage}" if model.stage else "registering"
    if model.progress_total:
        done, total = model.progress_done / 2**20, model.progress_total / 2**20
        line += f" ({done:.1f} of {total:.1f} MiB, {model.progress_percent}%)"
    return line


@admin.register(ServedModel)
class ServedModelAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "registration",
        "architecture",
        "parameters",
        "dtype",
        "max_model_len",
        "completions_only",
        "is_active",
    )  # the parsers are on the change page and in the filters: the list stays 1280 px wide
    list_filter = (
        "state",
        "is_active",
        "completions_only",
        "tool_parser",
        "reasoning_parser",
        "architecture",
    )
    search_fields = ("name", "path", "source")
    actions = ["register_again"]
    readonly_on_change = (
        "name",
        "registration",
        "failure_reason",
        "source",
        "path",
        "architecture",
        "dtype",
        "quantization",
        "num_parameters",
        "completions_only",
        "created_at",
        "updated_at",
    )

    @admin.display(description="state", ordering="state")
    def registration(self, obj: ServedModel) -> str:
        css = {"ready": "color: #2a7d2a", "failed": "color: #ba2121"}.get(obj.state, "")
        return format_html(
            '<span class="registration-{}" style="{}">{}</span>',
            obj.state,
            css,
            registration_status(obj),
        )

    @admin.action(description="Register the selected failed models again")
    def register_again(self, request, queryset):
        for model in queryset.filter(state=ServedModel.State.FAILED):
            registration.served_model_retry_registration(model=model, actor=request.user)
            self.message_user(request, f"{model.name}: registering again", messages.INFO)

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
        editable = [
            "max_model_len",
            "tool_parser",
            "reasoning_parser",
            "speculative_decoding",
            "drop_attribution_header",
            "is_active",
        ]
        return [*self.readonly_on_change, *editable]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        if not obj.is_ready:  # the registration writes these fields when it ends
            return self.get_fields(request, obj)
        return self.readonly_on_change

    # While a model registers, its pages reload every few seconds (templates/admin/
    # deployments/servedmodel/) to show the stage and progress the worker records.
    def changelist_view(self, request, extra_context=None):
        registering = ServedModel.objects.filter(state=ServedModel.State.REGISTERING).exists()
        return super().changelist_view(
            request, {**(extra_context or {}), "registering": registering}
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        model = self.get_object(request, object_id)
        registering = model is not None and model.state == ServedModel.State.REGISTERING
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "registering": registering}
        )

    def save_model(self, request, obj, form, change):
        if change:
            # ``obj`` already holds the new values; the service compares with the stored row.
            services.served_model_update(
                model=selectors.served_model_get_by_pk(pk=obj.pk),
                actor=request.user,
                **{field: form.cleaned_data[field] for field in form.changed_data},
            )
            return
        created = registration.served_model_request_registration(
            source=obj.path, name=obj.name, actor=request.user
        )
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
