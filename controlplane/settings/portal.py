"""The tenant portal (/portal/): its sign-in, single sign-on and limits on what tenants do
themselves (docs/operations.md, "Tenant portal")."""

from controlplane.settings.env import env

# Pages that need a signed-in person send others here (the admin has its own sign-in).
LOGIN_URL = "portal:login"
LOGIN_REDIRECT_URL = "portal:keys"
# Active keys a tenant may hold at once, made in the portal or by the operator.
PORTAL_MAX_KEYS_PER_TENANT = env.int("PORTAL_MAX_KEYS_PER_TENANT", 50)
# Seconds to wait for an identity provider's discovery document, keys and token endpoint.
PORTAL_OIDC_TIMEOUT_SECONDS = env.float("PORTAL_OIDC_TIMEOUT_SECONDS", 10.0)
# How long an invitation link (set your password) stays valid: Django's password-reset token.
PASSWORD_RESET_TIMEOUT = env.int("PORTAL_INVITATION_SECONDS", 7 * 24 * 3600)
