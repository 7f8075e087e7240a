"""The environment, read through django-environ: every settings module asks this one ``env``.

Typed reads (``env.int``, ``env.bool``, ``env.list``, ...) with the default beside each name.
A value that begins with ``$`` names another variable (django-environ's proxy); ``\\$`` is a
literal dollar sign.
"""

import environ

env = environ.Env()
# Secrets may begin with "$": let "\$" say so rather than make them unrepresentable.
env.escape_proxy = True
