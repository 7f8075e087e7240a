"""The engine as a service: reads requests from Redis streams, runs the busy loop, publishes.

``python -m engine`` and ``python manage.py run_engine`` both start ``EngineService``.
docs/protocol.md describes the Redis contract.
"""

from engine.service.loop import EngineService
from engine.service.settings import ServiceSettings

__all__ = ["EngineService", "ServiceSettings"]
