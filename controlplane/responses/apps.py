from django.apps import AppConfig


class ResponsesConfig(AppConfig):
    name = "controlplane.responses"
    label = "responses"
    verbose_name = "Stored responses"
