"""URL routes: the landing page, the admin, the tenant portal, the management API, the
OpenAI-compatible API, health, metrics, the schema and its interactive docs."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from controlplane.metrics.views import metrics
from controlplane.portal import written_docs

# The admin's "View site" link leads to the landing page.
admin.site.site_url = "/"

urlpatterns = [
    path("", TemplateView.as_view(template_name="landing/index.html"), name="landing"),
    path("admin/", admin.site.urls),
    path("dashboard/", include("controlplane.dashboard.urls")),
    path("portal/", include("controlplane.portal.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="openapi-schema"),
    # Interactive docs of that schema: "Try it out" sends real requests with an API key.
    path(
        "api/docs/",
        SpectacularSwaggerView.as_view(
            url_name="openapi-schema", template_name="api_docs/swagger_ui.html"
        ),
        name="api-docs",
    ),
    path("docs/", written_docs.doc_index, name="written-docs"),
    path("docs/<str:name>/", written_docs.doc_page, name="written-doc"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="openapi-schema"), name="api-redoc"),
    # The management API (deployments, nodes) for automation, on admin-scoped keys.
    path("api/", include("controlplane.management_api.urls")),
    # django-prometheus's metrics and the platform's, behind the token and network checks.
    path("metrics", metrics, name="prometheus-django-metrics"),
    path("", include("inference.urls")),
]
