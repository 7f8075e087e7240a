"""The tenant portal's pages: keys, usage, end users, stored responses and chat completions,
and members of the signed-in person's tenant. Every object comes through a selector that
takes that tenant."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.billing.money import currency
from controlplane.end_users import selectors as end_user_selectors
from controlplane.portal import selectors, services
from controlplane.portal.access import portal_page
from controlplane.portal.forms import EndUserControlsForm, KeyCreateForm, MemberAddForm
from controlplane.portal.invitations import invitation_path


def api_base_url(request) -> str:
    """The OpenAI SDK's base_url for this platform, as the browser reached it."""
    return f"{request.scheme}://{request.get_host()}/v1"


def _refuse(request, exc: Exception) -> None:
    messages.error(request, "; ".join(getattr(exc, "messages", None) or [str(exc)]))


@portal_page
def home(request, membership):
    return redirect("portal:keys")


@never_cache
@require_http_methods(["GET", "POST"])
@portal_page
def keys(request, membership):
    form = KeyCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            created = services.portal_key_create(membership=membership, **form.cleaned_data)
        except (ValidationError, PermissionDenied) as exc:
            _refuse(request, exc)
        else:
            # Rendered, not redirected: the secret is never in a URL, a session or a log.
            context = {"membership": membership, "created": created}
            context["base_url"] = api_base_url(request)
            return render(request, "portal/key_created.html", context)
    context = {
        "membership": membership,
        "keys": selectors.tenant_keys(tenant=membership.tenant),
        "form": form,
    }
    return render(request, "portal/keys.html", context)


@require_http_methods(["GET", "POST"])
@portal_page
def key_revoke(request, membership, key_id: int):
    key = selectors.tenant_key_get(tenant=membership.tenant, pk=key_id)
    if request.method == "POST":
        try:
            services.portal_key_revoke(membership=membership, key=key)
        except PermissionDenied as exc:
            _refuse(request, exc)
        else:
            messages.success(request, f"Revoked {key.prefix}… ({key.name}).")
        return redirect("portal:keys")
    return render(request, "portal/key_revoke.html", {"membership": membership, "key": key})


@portal_page
def usage(request, membership):
    days = 30
    context = {
        "membership": membership,
        "days": days,
        "usage": selectors.tenant_usage(tenant=membership.tenant, days=days),
    }
    return render(request, "portal/usage.html", context)


@never_cache
@require_http_methods(["GET", "POST"])
@portal_page
def end_users(request, membership):
    tenant = membership.tenant
    form = EndUserControlsForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.portal_end_user_set(membership=membership, **form.cleaned_data)
        except (ValidationError, PermissionDenied) as exc:
            _refuse(request, exc)
        else:
            messages.success(request, f"Saved the controls on {saved.name!r}.")
            return redirect("portal:end-users")
    query = request.GET.get("q", "")[:256]
    context = {
        "membership": membership,
        "form": form,
        "query": query,
        "month": end_user_selectors.end_users_of_month(tenant=tenant, query=query),
        "controls": end_user_selectors.end_user_controls(tenant=tenant),
        "default_budget": tenant.end_user_monthly_spend_budget,
        "currency": currency(),
    }
    return render(request, "portal/end_users.html", context)


@require_POST
@portal_page
def end_user_remove(request, membership, end_user_id: int):
    end_user = end_user_selectors.end_user_get(tenant=membership.tenant, pk=end_user_id)
    try:
        services.portal_end_user_remove(membership=membership, end_user=end_user)
    except PermissionDenied as exc:
        _refuse(request, exc)
    else:
        messages.success(request, f"Removed the controls on {end_user.name!r}.")
    return redirect("portal:end-users")


@portal_page
def responses(request, membership):
    page = Paginator(selectors.tenant_responses(tenant=membership.tenant), 50).get_page(
        request.GET.get("page")
    )
    return render(request, "portal/responses.html", {"membership": membership, "page": page})


@portal_page
def response_detail(request, membership, response_id: str):
    found = selectors.tenant_response_get(tenant=membership.tenant, response_id=response_id)
    context = {
        "membership": membership,
        "stored": found,
        "output_text": selectors.response_output_text(found),
    }
    return render(request, "portal/response_detail.html", context)


@portal_page
def chat_completions(request, membership):
    stored = selectors.tenant_chat_completions(tenant=membership.tenant)
    page = Paginator(stored, 50).get_page(request.GET.get("page"))
    return render(request, "portal/chat_completions.html", {"membership": membership, "page": page})


@portal_page
def chat_completion_detail(request, membership, completion_id: str):
    found = selectors.tenant_chat_completion_get(
        tenant=membership.tenant, completion_id=completion_id
    )
    context = {"membership": membership, "stored": found, "answers": selectors.chat_answers(found)}
    return render(request, "portal/chat_completion_detail.html", context)


@never_cache
@require_http_methods(["GET", "POST"])
@portal_page
def members(request, membership):
    form = MemberAddForm(request.POST or None)
    invitation = None
    if request.method == "POST" and form.is_valid():
        try:
            added = services.member_add(membership=membership, **form.cleaned_data)
        except (ValidationError, PermissionDenied) as exc:
            _refuse(request, exc)
        else:
            invitation = {
                "member": added,
                "url": request.build_absolute_uri(invitation_path(added.user)),
            }
            form = MemberAddForm()
    context = {
        "membership": membership,
        "members": selectors.tenant_members(tenant=membership.tenant),
        "form": form,
        "invitation": invitation,
    }
    return render(request, "portal/members.html", context)


@require_POST
@portal_page
def member_remove(request, membership, member_id: int):
    member = selectors.tenant_member_get(tenant=membership.tenant, pk=member_id)
    try:
        services.member_remove(membership=membership, member=member)
    except (ValidationError, PermissionDenied) as exc:
        _refuse(request, exc)
    else:
        messages.success(request, f"Removed {member.user.email}.")
    return redirect("portal:members")
