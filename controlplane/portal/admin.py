"""The portal's people and identity providers in the operator's admin."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models

from controlplane.portal.invitations import invitation_path
from controlplane.portal.models import ExternalIdentity, IdentityProvider, TenantMembership
from controlplane.portal.services import tenant_user_create


class _NewTenantUserForm(forms.ModelForm):
    email = forms.EmailField(
        help_text="A new account, signed in by this email: through the tenant's identity "
        "provider, or with a password set from the invitation link on the portal's Members page."
    )

    class Meta:
        model = TenantMembership
        fields = ("tenant", "role")

    def clean_email(self):
        email = self.cleaned_data["email"].lower()
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise ValidationError(f"{email} already has an account")
        return email


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    list_display = ("user_email", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__email", "user__username", "tenant__name")
    list_select_related = ("user", "tenant")
    autocomplete_fields = ("tenant",)

    @admin.display(description="email", ordering="user__email")
    def user_email(self, obj: TenantMembership) -> str:
        return obj.user.email or obj.user.get_username()

    def get_fields(self, request, obj=None):
        # Adding: an email (a new account); changing: the account is fixed, the role is not.
        return ("tenant", "role") if obj else ("email", "tenant", "role")

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = _NewTenantUserForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return ("tenant",) if obj else ()

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        created = tenant_user_create(
            tenant=form.cleaned_data["tenant"],
            email=form.cleaned_data["email"],
            role=form.cleaned_data["role"],
            actor=request.user,
        )
        obj.pk, obj.user_id = created.pk, created.user_id
        obj._state.adding = False
        link = request.build_absolute_uri(invitation_path(created.user))
        messages.info(request, f"Send {created.user.email} this link to set a password: {link}")


class ExternalIdentityInline(admin.TabularInline):
    model = ExternalIdentity
    fields = ("subject", "user", "last_login_at")
    readonly_fields = fields
    extra = 0
    can_delete = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


def _https_urls(field, **kwargs):
    if isinstance(field, models.URLField):
        kwargs["assume_scheme"] = "https"  # issuers are https
    return field.formfield(**kwargs)


class _IdentityProviderForm(forms.ModelForm):
    class Meta:
        model = IdentityProvider
        fields = "__all__"
        formfield_callback = _https_urls
        # Kept when the form is saved again, but not shown on the page.
        widgets = {"client_secret": forms.PasswordInput(render_value=True)}


@admin.register(IdentityProvider)
class IdentityProviderAdmin(admin.ModelAdmin):
    form = _IdentityProviderForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ("name", "tenant", "issuer", "email_domains", "default_role", "is_active")
    list_filter = ("is_active",)
    search_fields = ("name", "issuer", "email_domains", "tenant__name")
    autocomplete_fields = ("tenant",)
    fieldsets = (
        (None, {"fields": ("name", "tenant", "is_active")}),
        (
            "OpenID Connect client",
            {
                "fields": ("issuer", "client_id", "client_secret"),
                "description": "Register the platform at the provider as a confidential web "
                "client with the redirect URI https://YOUR-HOST/portal/sso/callback/ and the "
                "scopes openid, email and profile.",
            },
        ),
        ("People", {"fields": ("email_domains", "provision_users", "default_role")}),
    )
    inlines = [ExternalIdentityInline]
