from django.apps import AppConfig


class SharedPrefixesConfig(AppConfig):
    name = "controlplane.shared_prefixes"
    label = "shared_prefixes"
    verbose_name = "Shared prefixes"
