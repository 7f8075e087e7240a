from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "controlplane.portal"
    label = "portal"
    verbose_name = "Tenant portal"
