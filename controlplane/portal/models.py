"""Tenant portal: the people of a tenant (not Django staff), their roles, and the OpenID
Connect identity providers they may sign in with."""

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    # Ordered by what they may do: each role may do everything of the ones after it.
    OWNER = "owner", "owner: keys and members"
    MEMBER = "member", "member: keys"
    VIEWER = "viewer", "viewer: read only"


class TenantMembership(models.Model):
    """A person of a tenant. One tenant per user: a portal user sees that tenant only."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_membership"
    )
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "user__email"]
        verbose_name = "tenant user"

    def __str__(self) -> str:
        return f"{self.user.get_username()} ({self.tenant.name}, {self.role})"

    @property
    def can_manage_keys(self) -> bool:
        return self.role in (Role.OWNER, Role.MEMBER)

    @property
    def can_manage_members(self) -> bool:
        return self.role == Role.OWNER


class IdentityProvider(models.Model):
    """A company's OpenID Connect provider: its people sign in to their tenant's portal.

    People are matched by the verified email of their ID token (or by the subject they signed
    in with before); one not known yet is added to ``tenant`` with ``default_role`` when their
    email's domain is one of ``email_domains`` (no domain listed: any verified email).
    """

    name = models.CharField(max_length=100, unique=True, help_text="Shown on the sign-in page.")
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="identity_providers"
    )
    issuer = models.URLField(
        help_text="The provider's issuer URL; its discovery document is "
        "ISSUER/.well-known/openid-configuration."
    )
    client_id = models.CharField(max_length=255)
    client_secret = models.CharField(max_length=255, blank=True)
    email_domains = models.CharField(
        max_length=500,
        blank=True,
        help_text="Comma-separated email domains of this company (example.com). People whose "
        "email is in one sign in with this provider from the portal's sign-in page.",
    )
    default_role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    provision_users = models.BooleanField(
        default=True, help_text="Add people not known yet (off: only existing tenant users)."
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "identity provider (OIDC)"

    def __str__(self) -> str:
        return self.name

    @property
    def domains(self) -> list[str]:
        return [d.strip().lower() for d in self.email_domains.split(",") if d.strip()]

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


class ExternalIdentity(models.Model):
    """The provider's subject a user signed in with: later sign-ins match it, not the email."""

    provider = models.ForeignKey(
        IdentityProvider, on_delete=models.CASCADE, related_name="identities"
    )
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    last_login_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "subject"], name="one_user_per_subject")
        ]
        verbose_name_plural = "external identities"

    def __str__(self) -> str:
        return f"{self.provider.name}:{self.subject}"
