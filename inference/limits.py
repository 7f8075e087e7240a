"""The tenant's limits as the API applies them: controlplane.access.admission's checks, with
each refusal counted in ``platform:requests_refused`` (by tenant and reason) on the way out.
The access layer sits below the metrics one, so the count is made here."""

from __future__ import annotations

from controlplane.access import admission
from controlplane.access.admission import Admission
from controlplane.access.principals import AccessError, Principal
from controlplane.metrics.recorder import record_refusal

__all__ = ["Admission", "admit", "check_request_limits"]


# Refusals of the request's end user (their block or budget): their param names the field
# that named them, which only the API knows (``safety_identifier`` or ``user``).
END_USER_REASONS = frozenset({"user_blocked", "user_spend"})


async def _counted(principal: Principal, model: str, refusal: AccessError, param: str) -> None:
    """Count a limiter's refusal; an end user's names ``param``, the field that named them."""
    if refusal.limit_reason in END_USER_REASONS:
        refusal.param = param
    if refusal.limit_reason:
        await record_refusal(model=model, tenant=principal.tenant_slug, reason=refusal.limit_reason)


async def check_request_limits(
    principal: Principal, *, model: str, end_user: str = "", end_user_param: str = "user"
) -> None:
    """admission.check_request_limits; a refusal is counted with no model (not resolved yet:
    a client's model name is no label)."""
    try:
        await admission.check_request_limits(principal, model=model, end_user=end_user)
    except AccessError as refusal:
        await _counted(principal, "", refusal, end_user_param)
        raise


async def admit(
    principal: Principal,
    *,
    model: str,
    prompt_tokens: int,
    max_tokens: int,
    end_user: str = "",
    end_user_param: str = "user",
) -> Admission:
    """admission.admit (``model`` is a served model's name here); a refusal is counted."""
    try:
        return await admission.admit(
            principal,
            model=model,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            end_user=end_user,
        )
    except AccessError as refusal:
        await _counted(principal, model, refusal, end_user_param)
        raise
