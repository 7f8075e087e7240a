from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "controlplane.access"
    label = "access"
    verbose_name = "Access: keys, limits, throttles"
