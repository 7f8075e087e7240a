from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference API"

    def ready(self) -> None:
        # The engine and request metrics (vllm:*) and the fleet's cold starts join
        # django-prometheus's /metrics.
        from controlplane.metrics import register_collector

        register_collector()
