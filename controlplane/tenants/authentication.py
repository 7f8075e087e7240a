"""DRF authentication for ``Authorization: Bearer <key>``, following DRF's class contract.

``authenticate`` returns None when the request carries no bearer key ("not mine": other
authenticators may try), a ``(principal, principal)`` pair on success, and raises with an
OpenAI error body otherwise. ``authenticate_header`` makes DRF answer 401 (not 403).
The endpoint a key's scopes are checked against is the view's ``api_scope`` attribute, or the
request path.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from inference.access import AccessError, authenticate_sync


def _drf_error(error: AccessError) -> exceptions.APIException:
    cls = exceptions.AuthenticationFailed if error.status == 401 else exceptions.PermissionDenied
    exc = cls(error.message)
    exc.status_code = error.status
    # DRF renders a dict ``detail`` as the whole body: OpenAI's error object, nulls kept.
    exc.detail = error.body()
    return exc


class ApiKeyAuthentication(BaseAuthentication):
    www_authenticate_realm = "api"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.lower().startswith("bearer "):
            return None
        view = request.parser_context.get("view") if request.parser_context else None
        endpoint = getattr(view, "api_scope", None) or request.path
        try:
            principal = authenticate_sync(header, endpoint=endpoint)
        except AccessError as error:
            raise _drf_error(error) from error
        return principal, principal

    def authenticate_header(self, request) -> str:
        return f'Bearer realm="{self.www_authenticate_realm}"'
