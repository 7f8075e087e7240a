from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference API"

    def ready(self) -> None:
        # The engine and request metrics (vllm:*) join django-prometheus's /metrics.
        from controlplane.metrics import register_collector
        from controlplane.metrics.cold_start import register_cold_start_collector

        register_collector()
        register_cold_start_collector()  # scale to zero's cold starts (platform:cold_start*)
