"""The management API's endpoints. Each checks the admin key (``authentication.py``), reads
through the fleet selectors, writes through the fleet services with the key's owner as the
audited actor, and answers errors in OpenAI's body."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.common.api_error import ApiError
from controlplane.common.json_parser import StrictJSONParser
from controlplane.fleet import selectors, services
from controlplane.fleet.models import Deployment
from controlplane.fleet.services import SETTINGS, DeploymentError
from controlplane.management_api import serializers as s
from controlplane.management_api.authentication import admin_caller

_ERRORS = {
    code: OpenApiResponse(description=what)
    for code, what in (
        (400, "invalid input: OpenAI's error body naming the parameter"),
        (401, "no API key, or a bad one"),
        (403, "the key lacks the admin scope, or its owner is not active staff"),
        (404, "no such deployment or node"),
    )
}


def _validation_error(exc: exceptions.ValidationError) -> ApiError:
    """DRF's field errors as OpenAI's one message and ``param`` (the first field at fault)."""
    detail = exc.detail
    param = None
    while isinstance(detail, dict | list) and detail:
        if isinstance(detail, dict):
            param, detail = next(iter(detail.items()))
        else:
            detail = detail[0]
    if param in (None, "non_field_errors"):
        return ApiError(str(detail))
    return ApiError(f"{param}: {detail}", param=str(param))


def unknown_path(request):
    error = ApiError(f"Invalid URL ({request.method} {request.path})", status=404)
    return JsonResponse(error.body(), status=404)


class ManagementView(APIView):
    """JSON in, JSON out, an admin key required; errors as ``{"error": {...}}``."""

    authentication_classes: list = []
    permission_classes: list = []
    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]  # automation's JSON, never DRF's browsable HTML page

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.caller = admin_caller(
            request.headers.get("Authorization"), client_address=request.META.get("REMOTE_ADDR")
        )

    def who(self) -> dict[str, Any]:
        return {"actor": self.caller.user, "actor_label": self.caller.label}

    def handle_exception(self, exc):
        if isinstance(exc, DeploymentError):
            error = ApiError(str(exc))
        elif isinstance(exc, ApiError):
            error = exc
        elif isinstance(exc, exceptions.ValidationError):
            error = _validation_error(exc)
        elif isinstance(exc, exceptions.APIException):  # parse errors, 405, 415
            error = ApiError(str(exc.detail), status=exc.status_code)
        else:
            return super().handle_exception(exc)
        return JsonResponse(error.body(), status=error.status, headers=error.headers)

    def deployment(self, name: str) -> Deployment:
        found = selectors.deployment_get(name=name)
        if found is None:
            raise ApiError(f"No deployment named {name!r}.", status=404, param="name")
        return found

    def valid(self, serializer_class, request) -> dict[str, Any]:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def shown(self, name: str, code: int = status.HTTP_200_OK) -> Response:
        return Response(s.DeploymentSerializer(self.deployment(name)).data, status=code)


class DeploymentListView(ManagementView):
    @extend_schema(
        operation_id="deployments_list",
        responses={200: s.list_of(s.DeploymentSerializer), **_ERRORS},
    )
    def get(self, request):
        data = s.DeploymentSerializer(selectors.deployment_list(), many=True).data
        return Response({"object": "list", "data": data})

    @extend_schema(
        operation_id="deployments_create",
        request=s.DeploymentCreateSerializer,
        responses={201: s.DeploymentSerializer, **_ERRORS},
        description="Deploy a registered model (or deploy an existing deployment again).",
    )
    def post(self, request):
        data = self.valid(s.DeploymentCreateSerializer, request)
        deployed = services.deployment_deploy(**data, **self.who())
        return self.shown(deployed.name, status.HTTP_201_CREATED)


class DeploymentDetailView(ManagementView):
    @extend_schema(operation_id="deployments_retrieve", responses={200: s.DeploymentSerializer})
    def get(self, request, name: str):
        return self.shown(name)

    @extend_schema(
        operation_id="deployments_update",
        request=s.DeploymentUpdateSerializer,
        responses={200: s.DeploymentSerializer, **_ERRORS},
        description="New settings or model restart the engines; replicas alone scale.",
    )
    def patch(self, request, name: str):
        self.deployment(name)
        data = self.valid(s.DeploymentUpdateSerializer, request)
        settings = {key: data[key] for key in SETTINGS if key in data}
        services.deployment_update(
            name=name,
            model=data.get("model"),
            replicas=data.get("replicas"),
            **settings,
            **self.who(),
        )
        return self.shown(name)

    @extend_schema(
        operation_id="deployments_destroy",
        responses={200: s.DeletedSerializer, **_ERRORS},
        description="Undeploy: its engines drain and stop.",
    )
    def delete(self, request, name: str):
        self.deployment(name)
        services.deployment_undeploy(name=name, **self.who())
        return Response({"name": name, "object": "deployment.deleted", "deleted": True})


class DeploymentScaleView(ManagementView):
    @extend_schema(
        operation_id="deployments_scale",
        request=s.ScaleSerializer,
        responses={200: s.DeploymentSerializer, **_ERRORS},
    )
    def post(self, request, name: str):
        self.deployment(name)
        replicas = self.valid(s.ScaleSerializer, request)["replicas"]
        services.deployment_scale(name=name, replicas=replicas, **self.who())
        return self.shown(name)


class DeploymentStopView(ManagementView):
    @extend_schema(
        operation_id="deployments_stop",
        request=None,
        responses={200: s.DeploymentSerializer, **_ERRORS},
        description="Replicas to 0, remembering how many ran.",
    )
    def post(self, request, name: str):
        self.deployment(name)
        services.deployment_stop(name=name, **self.who())
        return self.shown(name)


class DeploymentStartView(ManagementView):
    @extend_schema(
        operation_id="deployments_start",
        request=None,
        responses={200: s.DeploymentSerializer, **_ERRORS},
        description="Back to the replicas running when it was stopped.",
    )
    def post(self, request, name: str):
        self.deployment(name)
        services.deployment_start(name=name, **self.who())
        return self.shown(name)


class DeploymentRestartView(ManagementView):
    @extend_schema(
        operation_id="deployments_restart",
        request=None,
        responses={200: s.DeploymentSerializer, **_ERRORS},
        description="A rolling restart with the same settings: one new replica at a time is "
        "started and ready before an old one drains.",
    )
    def post(self, request, name: str):
        self.deployment(name)
        services.deployment_restart(name=name, **self.who())
        return self.shown(name)


class NodeListView(ManagementView):
    @extend_schema(operation_id="nodes_list", responses={200: s.list_of(s.NodeSerializer)})
    def get(self, request):
        data = s.NodeSerializer(selectors.node_list(), many=True).data
        return Response({"object": "list", "data": data})


class NodeDetailView(ManagementView):
    @extend_schema(operation_id="nodes_retrieve", responses={200: s.NodeSerializer, **_ERRORS})
    def get(self, request, name: str):
        node = selectors.node_get(name=name)
        if node is None:
            raise ApiError(f"No node named {name!r}.", status=404, param="name")
        return Response(s.NodeSerializer(node).data)
