"""Signing in to the portal: a password (Django's auth, under the admin's lockout), single
sign-on through the company's OpenID Connect provider, and the invitation link that sets a
new member's password."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView, LogoutView, PasswordResetConfirmView
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from controlplane.portal import oidc, selectors
from controlplane.portal.forms import SsoStartForm
from controlplane.portal.services import SsoRefused, sso_user_for_claims

logger = logging.getLogger(__name__)

_SSO_SESSION_KEY = "portal_sso"


class PortalLoginView(LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True
    next_page = reverse_lazy("portal:keys")

    def get_context_data(self, **kwargs):
        return super().get_context_data(sso_form=SsoStartForm(), **kwargs)


class PortalLogoutView(LogoutView):
    next_page = reverse_lazy("portal:login")


class InvitationView(PasswordResetConfirmView):
    """A new member sets their password from the link their owner passed on (Django's
    password-reset token: one use, expires after PASSWORD_RESET_TIMEOUT)."""

    template_name = "portal/invitation.html"
    success_url = reverse_lazy("portal:login")

    def form_valid(self, form):
        messages.success(self.request, "Your password is set: sign in with your email.")
        return super().form_valid(form)


def _sign_in_page(request, error: str, status: int = 400):
    context = {"form": AuthenticationForm(request), "sso_form": SsoStartForm(), "sso_error": error}
    return render(request, "portal/login.html", context, status=status)


@require_POST
def sso_start(request):
    form = SsoStartForm(request.POST)
    if not form.is_valid():
        return _sign_in_page(request, "Enter your work email.")
    provider = selectors.identity_provider_for_email(email=form.cleaned_data["email"])
    if provider is None:
        return _sign_in_page(request, "No single sign-on is set up for that email's domain.")
    following = request.POST.get("next", "")
    request.session[_SSO_SESSION_KEY] = {
        "provider": provider.pk,
        "next": following
        if url_has_allowed_host_and_scheme(following, {request.get_host()}, request.is_secure())
        else "",
    }
    callback = request.build_absolute_uri(reverse("portal:sso-callback"))
    try:
        return oidc.sso_begin(request, provider, callback)
    except Exception:  # the provider's discovery document unreachable or malformed
        logger.warning("single sign-on with %s cannot start", provider.name, exc_info=True)
        return _sign_in_page(request, f"{provider.name} cannot be reached; try again.", 502)


@never_cache
@require_GET
def sso_callback(request):
    started = request.session.pop(_SSO_SESSION_KEY, None)
    if not started:
        return _sign_in_page(request, "That sign-in link is not for this browser; start again.")
    try:
        provider = selectors.identity_provider_get(pk=started["provider"])
    except Http404:
        return _sign_in_page(request, "That identity provider is no longer set up.")
    try:
        claims = oidc.sso_claims(request, provider)
        user = sso_user_for_claims(provider=provider, claims=claims)
    except oidc.OAuthError as exc:
        logger.warning("single sign-on with %s refused: %s", provider.name, exc)
        return _sign_in_page(request, f"{provider.name} did not sign you in ({exc.error}).")
    except SsoRefused as exc:
        return _sign_in_page(request, str(exc), status=403)
    except Exception:
        logger.warning("single sign-on with %s failed", provider.name, exc_info=True)
        return _sign_in_page(request, f"{provider.name} cannot be reached; try again.", 502)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect(started.get("next") or "portal:keys")
