"""manage.py add_tenant_user EMAIL --tenant NAME [--role owner|member|viewer]: a person of a
tenant for the portal; prints the invitation path where they set their password."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from controlplane.portal.invitations import invitation_path
from controlplane.portal.models import Role
from controlplane.portal.services import tenant_user_create
from controlplane.tenants.selectors import tenant_get


class Command(BaseCommand):
    help = (
        "Add a person to a tenant's portal. The last line of stdout is the invitation path "
        "(append it to the platform's URL) where they set a password; people of a tenant "
        "with single sign-on can sign in through it instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("email")
        parser.add_argument("--tenant", required=True, help="tenant name or slug")
        parser.add_argument("--role", choices=Role.values, default=Role.OWNER)

    def handle(self, *args, email, tenant, role, **options):
        found = tenant_get(name_or_slug=tenant)
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        try:
            membership = tenant_user_create(
                tenant=found, email=email, role=role, actor_label="manage.py"
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"added {membership.user.email} to {found.name} as {role}")
        self.stdout.write(invitation_path(membership.user))
