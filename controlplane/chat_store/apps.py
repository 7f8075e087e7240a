from django.apps import AppConfig


class ChatStoreConfig(AppConfig):
    name = "controlplane.chat_store"
    label = "chat_store"
    verbose_name = "Stored chat completions"
