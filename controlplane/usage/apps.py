from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "controlplane.usage"
    label = "usage"
    verbose_name = "Usage"

    def ready(self) -> None:
        # The tenant and key admins show this month's spend through these (tenants sits below
        # usage, so it cannot import them itself).
        from controlplane.tenants import spend_columns
        from controlplane.usage.budget_display import key_spend_used, tenant_spend_used

        spend_columns.register(tenant=tenant_spend_used, key=key_spend_used)
