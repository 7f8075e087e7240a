from django.apps import AppConfig


class LauncherConfig(AppConfig):
    """The platform's processes, brought up together: ``manage.py serve``, the process
    commands, private Redis and PostgreSQL servers, the first run's demo set-up."""

    name = "controlplane.launcher"
    label = "launcher"
    verbose_name = "Platform"
