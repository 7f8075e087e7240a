"""Admin for files and batches: every tenant's batches with status, progress, counts and links to
their files (downloadable), and a cancel action that goes through ``services.batch_cancel``."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import FileResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from controlplane.batches import services
from controlplane.batches.models import Batch, StoredFile
from controlplane.common.api_error import ApiError


def _file_link(stored: StoredFile | None):
    if stored is None:
        return "-"
    url = reverse("admin:batches_storedfile_download", args=[stored.pk])
    return format_html('<a href="{}">{}</a> ({} bytes)', url, stored.pk, stored.bytes)


@admin.register(StoredFile)
class StoredFileAdmin(admin.ModelAdmin):
    list_display = ["id", "tenant", "filename", "purpose", "bytes", "created_at", "download"]
    list_filter = ["purpose", "tenant"]
    search_fields = ["id", "filename"]
    readonly_fields = ["id", "tenant", "filename", "purpose", "bytes", "created_at", "download"]
    fields = readonly_fields

    def has_add_permission(self, request) -> bool:
        return False  # tenants upload through the API

    @admin.display(description="content")
    def download(self, obj: StoredFile):
        return _file_link(obj)

    def get_urls(self):
        download = self.admin_site.admin_view(self.download_view)
        own = [path("<str:file_id>/download/", download, name="batches_storedfile_download")]
        return own + super().get_urls()

    def download_view(self, request, file_id: str):
        if not self.has_view_permission(request):
            raise PermissionDenied
        stored = get_object_or_404(StoredFile, pk=file_id)
        return FileResponse(
            services.file_open(stored), as_attachment=True, filename=stored.filename
        )


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "tenant",
        "endpoint",
        "status",
        "progress",
        "completed",
        "failed",
        "created_at",
    ]
    list_filter = ["status", "tenant", "endpoint"]
    search_fields = ["id"]
    actions = ["cancel"]
    fields = [
        "id",
        "tenant",
        "api_key",
        "endpoint",
        "status",
        "progress",
        "completed",
        "failed",
        "input",
        "output",
        "error",
        "errors",
        "metadata",
        "created_at",
        "in_progress_at",
        "finalizing_at",
        "completed_at",
        "failed_at",
        "cancelling_at",
        "cancelled_at",
        "expires_at",
        "expired_at",
    ]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="progress")
    def progress(self, obj: Batch) -> str:
        return f"{obj.done}/{obj.total}"

    @admin.display(description="input file")
    def input(self, obj: Batch):
        return _file_link(obj.input_file)

    @admin.display(description="output file")
    def output(self, obj: Batch):
        return _file_link(obj.output_file)

    @admin.display(description="error file")
    def error(self, obj: Batch):
        return _file_link(obj.error_file)

    def has_cancel_permission(self, request) -> bool:
        # Batches are read-only here, but cancelling one is a change.
        return request.user.has_perm("batches.change_batch")

    @admin.action(description="Cancel the selected batches", permissions=["cancel"])
    def cancel(self, request, queryset):
        cancelled = 0
        for batch in queryset:
            try:
                services.batch_cancel(tenant_id=batch.tenant_id, batch_id=batch.pk)
                cancelled += 1
            except ApiError as exc:
                self.message_user(request, f"{batch.pk}: {exc.message}", messages.WARNING)
        if cancelled:
            self.message_user(request, f"Asked {cancelled} batch(es) to stop.", messages.SUCCESS)
