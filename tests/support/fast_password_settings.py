"""The platform's settings with a fast password hasher, for processes a test starts to sign in
many times (``DJANGO_SETTINGS_MODULE=tests.support.fast_password_settings``).

Django's default PBKDF2 takes about 0.5 s of CPU a password on the slower CI machines, and it
runs for every try, a name that does not exist included; a lockout test that guesses thirty
times spent most of its minute hashing. What such a test checks is who may sign in, not how a
password is stored.
"""

from controlplane.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
