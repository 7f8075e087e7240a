"""Admin sign-in lockout: django-axes, its counters in the Redis cache, a limit per username
and per address (controlplane/access/login_lockout.py says why each choice).

After ``ADMIN_LOGIN_FAILURES_PER_USERNAME`` wrong passwords for one username (default 5), or
``ADMIN_LOGIN_FAILURES_PER_ADDRESS`` from one address (default 20), sign-in is refused until
``ADMIN_LOGIN_LOCKOUT_SECONDS`` (default 900) have passed without another try.
"""

from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.env import env

ADMIN_LOGIN_FAILURES_PER_USERNAME = env.int("ADMIN_LOGIN_FAILURES_PER_USERNAME", 5)
ADMIN_LOGIN_FAILURES_PER_ADDRESS = env.int("ADMIN_LOGIN_FAILURES_PER_ADDRESS", 20)
if min(ADMIN_LOGIN_FAILURES_PER_USERNAME, ADMIN_LOGIN_FAILURES_PER_ADDRESS) < 1:
    raise ImproperlyConfigured("ADMIN_LOGIN_FAILURES_PER_USERNAME and _PER_ADDRESS must be >= 1")

AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = "controlplane.access.login_lockout.highest_failure_limit"
AXES_COOLOFF_TIME = timedelta(seconds=env.int("ADMIN_LOGIN_LOCKOUT_SECONDS", 900))
# Redis (CACHES["default"]): shared by every Daphne process, expired by Redis after the
# cool-off, and no row written per wrong password.
AXES_HANDLER = "controlplane.access.login_lockout.PerParameterLimitCacheHandler"
AXES_LOCKOUT_CALLABLE = "controlplane.access.login_lockout.admin_lockout_page"
# The cache handler keeps no attempt rows: axes' admin pages would always be empty.
AXES_ENABLE_ADMIN = False
# Not the "AXES: BEGIN" line on every process start, nor user agents in its log lines.
AXES_VERBOSE = False

# Axes' backend refuses a locked-out client before the password is checked; it must come first.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
