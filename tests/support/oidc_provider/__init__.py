"""A real OpenID Connect provider for the portal's single sign-on tests: a small Django site
on django-oauth-toolkit, run as a process of its own (``python -m tests.support.oidc_provider``)
with its own database, users, signing key and one registered client (the platform)."""
