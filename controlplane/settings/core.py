"""Django core: apps, middleware, templates, static files (security: security.py)."""

from pathlib import Path

from controlplane.settings.env import env

BASE_DIR = Path(__file__).resolve().parent.parent.parent
# Everything the platform writes at run time (database, models, logs, Redis) lives here.
VAR_DIR = Path(env.str("PLATFORM_VAR_DIR", str(BASE_DIR / "var")))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_prometheus",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's and ReDoc's files, served by the platform (no CDN): /api/docs/.
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "controlplane.launcher",
    "controlplane.tenants",
    "controlplane.access",
    "controlplane.deployments",
    "controlplane.fleet",
    "controlplane.adapters",
    "controlplane.shared_prefixes",
    "controlplane.billing",
    "controlplane.end_users",
    "controlplane.usage",
    "controlplane.audit",
    "controlplane.batches",
    "controlplane.responses",
    "controlplane.chat_store",
    "controlplane.portal",
    "controlplane.dashboard",
    "inference",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The client's address for the request: failed API keys are throttled per address.
    "inference.credentials.ClientAddressMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    # Last, as axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]
# The JSON API's paths (/v1/..., /tokenize, /detokenize, /v2/rerank) under Daphne: metrics,
# security headers and the client's address, on the event loop (controlplane/common/
# api_middleware.py); the browser's middlewares above would add a thread hop per hook.
API_MIDDLEWARE = [
    "controlplane.common.api_middleware.InlinePrometheusBeforeMiddleware",
    "controlplane.common.api_middleware.InlineSecurityMiddleware",
    "inference.credentials.ClientAddressMiddleware",
    "controlplane.common.api_middleware.InlinePrometheusAfterMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
