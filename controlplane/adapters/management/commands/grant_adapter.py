"""`manage.py grant_adapter NAME --tenant T [--tenant T ...] [--revoke]`."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.adapters import services
from controlplane.adapters.selectors import adapter_get
from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.tenants.selectors import tenant_get


class Command(BaseCommand):
    help = "Grant a LoRA adapter to tenants (or revoke the grant with --revoke)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the adapter's name")
        parser.add_argument("--tenant", action="append", required=True, help="tenant name or slug")
        parser.add_argument("--revoke", action="store_true", help="remove the grant instead")

    def handle(self, *args, **options):
        adapter = adapter_get(name=options["name"])
        if adapter is None:
            raise CommandError(f"unknown adapter {options['name']!r}")
        change = "The revocation" if options["revoke"] else "The grant"
        warn_if_no_running_platform(self, change_not_announced(change))
        for name in options["tenant"]:
            tenant = tenant_get(name_or_slug=name)
            if tenant is None:
                raise CommandError(f"unknown tenant {name!r}")
            service = services.adapter_revoke_grant if options["revoke"] else services.adapter_grant
            service(adapter=adapter, tenant=tenant, actor_label="manage.py grant_adapter")
            verb = "revoked from" if options["revoke"] else "granted to"
            self.stdout.write(f"adapter {adapter.name} {verb} {tenant.slug}")
        if not adapter.is_ready:
            self.stdout.write(f"note: adapter {adapter.name} is {adapter.state}, not callable yet")
