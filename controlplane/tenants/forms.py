"""Admin forms for tenants and keys: validation the services expect, at the edge."""

from __future__ import annotations

from django import forms
from django.utils import timezone

from controlplane.tenants.models import API_SCOPES, ApiKey


class ApiKeyCreateForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in API_SCOPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Endpoints this key may call. None ticked: every endpoint.",
    )

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes", "expires_at"]
        help_texts = {"expires_at": "Empty: never expires."}

    def clean_expires_at(self):
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return expires_at
