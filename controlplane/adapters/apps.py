from django.apps import AppConfig


class AdaptersConfig(AppConfig):
    name = "controlplane.adapters"
    label = "adapters"
    verbose_name = "LoRA adapters"
