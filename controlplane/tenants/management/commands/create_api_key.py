"""manage.py create_api_key --tenant NAME [--name KEYNAME] [--scope S ...] [--expires-days N].

Prints the secret once, alone on the last line of stdout; only its hash is stored.
``--staff-user NAME`` instead of ``--tenant`` makes the key a staff user's own (on their
private tenant): the only keys that may hold the ``admin`` scope of the management API.
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.tenants.models import API_SCOPES
from controlplane.tenants.selectors import tenant_get
from controlplane.tenants.services import api_key_create, tenant_get_or_create_playground


class Command(BaseCommand):
    help = "Create an API key for a tenant and print its secret (shown only this once)."

    def add_arguments(self, parser):
        owner = parser.add_mutually_exclusive_group(required=True)
        owner.add_argument("--tenant", help="tenant name or slug")
        owner.add_argument(
            "--staff-user", help="a staff user's own key (for --scope admin: the management API)"
        )
        parser.add_argument("--name", default="default", help="a label for the key")
        parser.add_argument(
            "--scope",
            action="append",
            default=[],
            choices=API_SCOPES,
            help="allow only this endpoint (repeatable; default: all)",
        )
        parser.add_argument("--expires-days", type=float, help="expire after N days")

    def handle(self, *args, tenant, staff_user, name, scope, expires_days, **options):
        if staff_user is not None:
            user = get_user_model().objects.filter(username=staff_user, is_staff=True).first()
            if user is None or not user.is_active:
                raise CommandError(f"no active staff user named {staff_user!r}")
            found = tenant_get_or_create_playground(user=user)
        else:
            found = tenant_get(name_or_slug=tenant)
        if found is None:
            raise CommandError(f"no tenant named {tenant!r}")
        expires_at = None
        if expires_days is not None:
            if expires_days <= 0:
                raise CommandError("--expires-days must be positive")
            expires_at = timezone.now() + timedelta(days=expires_days)
        warn_if_no_running_platform(self, change_not_announced("The new key"))
        try:
            created = api_key_create(
                tenant=found,
                name=name,
                scopes=scope,
                expires_at=expires_at,
                actor_label="manage.py",
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stderr.write(
            f"created key {created.key.prefix}… for {found.name!r}; "
            "the secret below is shown only once:"
        )
        self.stdout.write(created.secret)
