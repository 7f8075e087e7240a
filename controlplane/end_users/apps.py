from django.apps import AppConfig


class EndUsersConfig(AppConfig):
    name = "controlplane.end_users"
    label = "end_users"
    verbose_name = "End users"
