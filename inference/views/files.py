"""/v1/files: upload (multipart, streamed to a temporary file), list, retrieve, download, delete.

Files belong to the key's tenant; another tenant's id answers 404, like one that does not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from controlplane.batches import selectors, services
from controlplane.batches.models import StoredFile
from controlplane.batches.representation import file_object
from controlplane.common.cursor_pages import page_object
from inference.errors import invalid_request
from inference.schemas.files import (
    FileDeletedSerializer,
    FileObjectSerializer,
    FileUploadSerializer,
)
from inference.schemas.pages import PAGE_PARAMETERS, page_of
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import page_params
from inference.zero_retention import refuse_keeping

DOWNLOAD_CHUNK_BYTES = 256 * 1024

FILE_FOUND = OpenApiResponse(FileObjectSerializer, description="A file of your tenant.")


def _store_upload(request: HttpRequest, tenant_id: int) -> StoredFile:
    """Parse the multipart body (Django's upload handlers write a big file to a temporary file
    as it is read) and store the file."""
    try:
        fields = {"file": request.FILES.get("file"), "purpose": request.POST.get("purpose")}
    except MultiPartParserError as exc:
        raise invalid_request(f"The multipart body could not be parsed: {exc}") from exc
    given = {name: value for name, value in fields.items() if value is not None}
    body = validate_body(FileUploadSerializer, given)
    return services.file_create(
        tenant_id=tenant_id,
        upload=body["file"],
        filename=body["file"].name or "",
        purpose=body["purpose"],
    )


class FileListView(AsyncApiView):
    """Upload a file (``purpose=batch``), or list this tenant's files."""

    endpoint = "files"

    @extend_schema(
        operation_id="createFile",
        request={"multipart/form-data": FileUploadSerializer},
        responses={200: FILE_FOUND},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        refuse_keeping(principal, "files are not uploaded")
        stored = await sync_to_async(_store_upload)(request, principal.tenant_id)
        return json_response(file_object(stored))

    @extend_schema(
        operation_id="listFiles",
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("purpose", str, description="Only files of this purpose."),
            OpenApiParameter("order", str, enum=["asc", "desc"], description="By creation time."),
        ],
        responses={
            200: OpenApiResponse(
                page_of(FileObjectSerializer, "FileList"), description="Your tenant's files."
            )
        },
        tags=["OpenAI"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        after, limit, ascending = page_params(request.GET, default_limit=100)
        files = await sync_to_async(selectors.file_list)(
            tenant_id=principal.tenant_id,
            purpose=request.GET.get("purpose"),
            after=after,
            limit=limit,
            ascending=ascending,
        )
        return json_response(page_object(files, limit=limit, render=file_object))


class FileDetailView(AsyncApiView):
    """One file's object, or delete it (and its bytes)."""

    endpoint = "files"

    @extend_schema(operation_id="retrieveFile", responses={200: FILE_FOUND}, tags=["OpenAI"])
    async def get(self, request, file_id: str):
        principal = await self.authenticate()
        stored = await sync_to_async(selectors.file_get)(
            tenant_id=principal.tenant_id, file_id=file_id
        )
        return json_response(file_object(stored))

    @extend_schema(
        operation_id="deleteFile",
        responses={
            200: OpenApiResponse(
                FileDeletedSerializer, description="The file and its bytes were deleted."
            )
        },
        tags=["OpenAI"],
    )
    async def delete(self, request, file_id: str):
        principal = await self.authenticate()
        await sync_to_async(services.file_delete)(tenant_id=principal.tenant_id, file_id=file_id)
        return json_response({"id": file_id, "object": "file", "deleted": True})


async def _chunks(handle) -> AsyncIterator[bytes]:
    """The file's bytes, a chunk at a time, read in a thread (storage may be a network away)."""
    try:
        while chunk := await asyncio.to_thread(handle.read, DOWNLOAD_CHUNK_BYTES):
            yield chunk
    finally:
        await asyncio.to_thread(handle.close)


class FileContentView(AsyncApiView):
    """The file's content, streamed."""

    endpoint = "files"

    @extend_schema(
        operation_id="downloadFile",
        responses={
            200: OpenApiResponse(
                {"type": "string", "format": "binary"}, description="The file's bytes, streamed."
            )
        },
        tags=["OpenAI"],
    )
    async def get(self, request, file_id: str):
        principal = await self.authenticate()
        stored = await sync_to_async(selectors.file_get)(
            tenant_id=principal.tenant_id, file_id=file_id
        )
        handle = await sync_to_async(services.file_open)(stored)
        response = StreamingHttpResponse(_chunks(handle), content_type="application/octet-stream")
        response["Content-Length"] = str(stored.bytes)
        response["Content-Disposition"] = f'attachment; filename="{stored.id}.jsonl"'
        return response
