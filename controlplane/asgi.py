"""The ASGI application: Django for HTTP (JSON and SSE), Channels for WebSockets."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from django.core.asgi import get_asgi_application
from django.urls import get_resolver

# Django must be set up before anything imports models (the websocket routes do).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from controlplane.access.lanes import lane_of  # noqa: E402
from controlplane.common.api_middleware import ApiASGIHandler, SplitByPath  # noqa: E402
from controlplane.common.daphne_bodies import adjust_daphne_bodies  # noqa: E402
from controlplane.metrics.access import metrics_bearer_token  # noqa: E402
from controlplane.metrics.metrics_port import start_configured_metrics_port  # noqa: E402
from engine.startup_heap import freeze_startup_heap  # noqa: E402
from inference.body_limit import BodySizeLimit, capped_limit_for, is_api_path  # noqa: E402
from inference.routing import websocket_urlpatterns  # noqa: E402

# Before the first scrape: the generated metrics token's file (when METRICS_BEARER_TOKEN is
# unset) exists for Prometheus to read, and the dedicated metrics port (METRICS_PORT) listens.
metrics_bearer_token()
start_configured_metrics_port()
# Uploads reach Django as a stream, a malformed one gets the API's JSON error, and a body
# declared over its path's cap is dropped as it arrives instead of buffered.
adjust_daphne_bodies(capped_limit_for)

application = ProtocolTypeRouter(
    {
        # JSON API bodies over API_MAX_REQUEST_BYTES get a 413 before Django reads them; the
        # API's paths run through their own, shorter middleware (settings.API_MIDDLEWARE).
        # Each API request first takes its tenant's lane (controlplane/common/tenant_lanes.py).
        "http": BodySizeLimit(
            SplitByPath(ApiASGIHandler(lane_of=lane_of), django_asgi_app, is_api_path)
        ),
        "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
    }
)

# Every view module, imported now rather than by the first request: after the freeze below,
# the URLconf's ~350 lazily imported modules kept ~20,000 objects in the collected heap, a
# third of what each full collection walked under a flood (2026-11-26).
get_resolver().url_patterns  # noqa: B018

# Last: everything imported so far lives as long as the process. Full collections walked its
# ~140,000 objects, 100-150 ms each, a few times a second under a burst of requests, during
# which no request moved (a tenant's time to first token under another's flood, 2026-11-25).
freeze_startup_heap()
