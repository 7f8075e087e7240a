"""Admin for served models (registration itself goes through ``manage.py load_model``)."""

from django.contrib import admin

from controlplane.deployments.models import ServedModel


@admin.register(ServedModel)
class ServedModelAdmin(admin.ModelAdmin):
    list_display = ("name", "architecture", "dtype", "max_model_len", "is_active", "updated_at")
    list_filter = ("is_active", "architecture")
    search_fields = ("name", "path")
    readonly_fields = ("architecture", "dtype", "num_parameters", "created_at", "updated_at")
