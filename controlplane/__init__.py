"""The Django project: settings, URLs, the ASGI application and the Celery app.

It is not called ``platform`` because a top-level package of that name shadows Python's
standard ``platform`` module, which torch, uuid, redis and pytest import.
"""

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]
