"""URL routes: the landing page, the admin, the management API, the OpenAI-compatible API,
health, metrics and the schema."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView

from controlplane.metrics.views import metrics

# The admin's "View site" link leads to the landing page.
admin.site.site_url = "/"

urlpatterns = [
    path("", TemplateView.as_view(template_name="landing/index.html"), name="landing"),
    path("admin/", admin.site.urls),
    path("dashboard/", include("controlplane.dashboard.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="openapi-schema"),
    # The management API (deployments, nodes) for automation, on admin-scoped keys.
    path("api/", include("controlplane.management_api.urls")),
    # django-prometheus's metrics and the platform's, behind the token and network checks.
    path("metrics", metrics, name="prometheus-django-metrics"),
    path("", include("inference.urls")),
]
