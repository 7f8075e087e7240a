"""/playground/: a chat page whose tokens stream over the WebSocket; and its static assets.

Daphne serves no static files itself, so in development the project's own assets are served
through staticfiles' finders here (deployments put a CDN-free web server or whitenoise in front).
"""

from __future__ import annotations

import mimetypes

from asgiref.sync import sync_to_async
from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET


@require_GET
async def playground(request):
    return await sync_to_async(render)(request, "playground/index.html", {})


def _open_asset(path: str):
    found = finders.find(path)
    if not found:
        raise Http404(f"no static file {path}")
    content_type, _ = mimetypes.guess_type(found)
    return FileResponse(open(found, "rb"), content_type=content_type or "application/octet-stream")


async def static_asset(request, path: str):
    return await sync_to_async(_open_asset, thread_sensitive=False)(path)


async def favicon(request):
    """Browsers ask each origin for /favicon.ico on every page they show: answer it (from
    static/) rather than fill the logs with 404s."""
    response = await static_asset(request, "favicon.ico")
    response["Cache-Control"] = "public, max-age=86400"
    return response
