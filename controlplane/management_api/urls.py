"""/api/ routes of the management API (included by controlplane/urls.py). Deployment names may
hold slashes (they default to model names such as "org/model"), so the action routes come
before the detail route that would swallow them."""

from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from controlplane.management_api import views

urlpatterns = [
    path("deployments", views.DeploymentListView.as_view(), name="api-deployments"),
    path("deployments/<path:name>/scale", views.DeploymentScaleView.as_view(), name="api-scale"),
    path("deployments/<path:name>/stop", views.DeploymentStopView.as_view(), name="api-stop"),
    path("deployments/<path:name>/start", views.DeploymentStartView.as_view(), name="api-start"),
    path(
        "deployments/<path:name>/restart",
        views.DeploymentRestartView.as_view(),
        name="api-restart",
    ),
    path(
        "deployments/<path:name>",
        views.DeploymentDetailView.as_view(),
        name="api-deployment-detail",
    ),
    path("nodes", views.NodeListView.as_view(), name="api-nodes"),
    path("nodes/<path:name>", views.NodeDetailView.as_view(), name="api-node-detail"),
    # Last: any other /api/ path answers in JSON, as /v1 does, not with an HTML page.
    re_path(r"^[\s\S]*\Z", csrf_exempt(views.unknown_path), name="api-unknown-path"),
]
