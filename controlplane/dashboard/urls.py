"""Dashboard routes (mounted under /dashboard/)."""

from django.urls import path

from controlplane.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.dashboard, name="index"),
    path("data.json", views.dashboard_data, name="data"),
]
