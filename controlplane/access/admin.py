"""The admin's sign-in form: it says so when repeated wrong passwords locked it out."""

from __future__ import annotations

from django.contrib import admin

from controlplane.access.login_lockout import LockoutAdminAuthenticationForm

admin.site.login_form = LockoutAdminAuthenticationForm
