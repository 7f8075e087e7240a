"""manage.py revoke_api_key PREFIX_OR_SECRET: every API process refuses the key within seconds."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.tenants.key_secrets import prefix_of, secret_matches
from controlplane.tenants.selectors import api_key_get_by_prefix
from controlplane.tenants.services import api_key_revoke


class Command(BaseCommand):
    help = "Revoke an API key given its visible prefix (sk-xxxxxxxx) or its full secret."

    def add_arguments(self, parser):
        parser.add_argument("key", help="the key's prefix or its secret")

    def handle(self, *args, key, **options):
        prefix = prefix_of(key) or key
        found = api_key_get_by_prefix(prefix=prefix)
        # A full secret must match, or anyone could type a prefix and look like its owner.
        if found is None or (prefix != key and not secret_matches(key, found.secret_hash)):
            raise CommandError(f"no API key matches {prefix!r}")
        if found.revoked_at is not None:
            self.stdout.write(f"key {found.prefix} was already revoked at {found.revoked_at}")
            return
        warn_if_no_running_platform(self, change_not_announced("The revocation"))
        api_key_revoke(key=found, actor_label="manage.py")
        self.stdout.write(f"revoked key {found.prefix} of {found.tenant.name!r}")
