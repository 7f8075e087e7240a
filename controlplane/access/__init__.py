"""Who may call, and how much: API keys and staff sessions resolved to a Principal (through the
per-process key cache), admission under the tenant's rate limits and budgets, the
failed-authentication throttle and the admin sign-in lockout (on django-axes). Runtime policy
over the tenants' rows; it owns no model."""
