"""Liveness: the API process is up and answering."""

from django.http import JsonResponse


async def health(request):
    return JsonResponse({"status": "ok"})
