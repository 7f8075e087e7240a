"""Admin forms for tenants and keys: validation the services expect, at the edge."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from controlplane.tenants.models import API_SCOPES, ApiKey
from controlplane.tenants.services import admin_scope_check


class ApiKeyCreateForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in API_SCOPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Endpoints this key may call. None ticked: every endpoint of the OpenAI "
        "API. admin (the management API) only on a staff user's own tenant.",
    )

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes", "expires_at", "monthly_spend_budget"]
        help_texts = {"expires_at": "Empty: never expires."}

    def clean(self):
        data = super().clean()
        if data.get("tenant") is not None:
            try:
                admin_scope_check(tenant=data["tenant"], scopes=data.get("scopes") or ())
            except ValidationError as exc:
                self.add_error("scopes", exc)
        return data

    def clean_expires_at(self):
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return expires_at
