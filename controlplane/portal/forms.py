"""Forms of the tenant portal."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from controlplane.end_users.models import MAX_NAME_LENGTH
from controlplane.portal.models import Role
from controlplane.tenants.models import ADMIN_SCOPE, API_SCOPES

TENANT_SCOPES = [(scope, scope) for scope in API_SCOPES if scope != ADMIN_SCOPE]


class KeyCreateForm(forms.Form):
    name = forms.CharField(max_length=200, initial="default")
    scopes = forms.MultipleChoiceField(
        choices=TENANT_SCOPES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every endpoint of the OpenAI API.",
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=3650, required=False, help_text="Empty: never expires."
    )


class MemberAddForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class EndUserControlsForm(forms.Form):
    name = forms.CharField(
        max_length=MAX_NAME_LENGTH,
        strip=False,
        help_text="Exactly as your requests send it in user or safety_identifier.",
    )
    monthly_spend_budget = forms.DecimalField(
        required=False,
        min_value=Decimal("0.01"),
        max_digits=14,
        decimal_places=2,
        help_text="Per calendar month (UTC); empty: the budget per end user of your account.",
    )
    blocked = forms.BooleanField(required=False, help_text="Refuse every request naming them.")


class SsoStartForm(forms.Form):
    email = forms.EmailField(label="Work email")
