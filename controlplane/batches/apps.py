from django.apps import AppConfig


class BatchesConfig(AppConfig):
    name = "controlplane.batches"
    label = "batches"
    verbose_name = "Files and batches"
