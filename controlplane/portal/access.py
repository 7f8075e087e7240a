"""Who may open a portal page: a signed-in, active person of an active tenant."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import render
from django.urls import reverse

from controlplane.portal.selectors import membership_for_user


def portal_page(view):
    """Pass the signed-in person's membership to ``view(request, membership, ...)``; send
    strangers to the sign-in page, and people of no tenant (staff, say) to a page saying so."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("portal:login"))
        membership = membership_for_user(user=request.user)
        if membership is None:
            return render(request, "portal/no_tenant.html", status=403)
        return view(request, membership, *args, **kwargs)

    return wrapper
