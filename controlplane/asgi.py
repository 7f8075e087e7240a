"""The ASGI application: Django for HTTP (JSON and SSE), Channels for WebSockets."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from django.core.asgi import get_asgi_application

# Django must be set up before anything imports models (the websocket routes do).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from inference.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
    }
)
