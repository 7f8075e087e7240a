"""The test identity provider's Django settings (nothing of the platform's)."""

import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

SECRET_KEY = "identity-provider-for-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.support.oidc_provider.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [os.path.join(os.path.dirname(__file__), "templates")],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["IDP_DATABASE"]}
}
# The platform under test runs on the same host (127.0.0.1), where cookies do not tell
# ports apart: the provider's own names keep it from replacing the platform's session.
SESSION_COOKIE_NAME = "idp_session"
CSRF_COOKIE_NAME = "idp_csrftoken"
LOGIN_URL = "/login/"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": os.environ["IDP_ISSUER"],
    "OIDC_RSA_PRIVATE_KEY": _key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode(),
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "email": "Email address", "profile": "Profile"},
    "OAUTH2_VALIDATOR_CLASS": "tests.support.oidc_provider.validator.EmailClaimsValidator",
}
