"""Forms of the tenant portal."""

from __future__ import annotations

from django import forms

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


class SsoStartForm(forms.Form):
    email = forms.EmailField(label="Work email")
