"""URL routes: the admin, the OpenAI-compatible API, health, metrics and the schema."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("dashboard/", include("controlplane.dashboard.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="openapi-schema"),
    path("", include("django_prometheus.urls")),
    path("", include("inference.urls")),
]
