"""The engine as a service (``python -m engine``, ``manage.py run_engine``): ``EngineService``
(loop.py) fed and drained by the Redis threads (redis_input.py, redis_output.py), taking over
from dead engines (recovery.py); cli.py holds what both commands share. docs/protocol.md
describes the Redis contract."""

from engine.config import ServiceSettings
from engine.service.loop import EngineService

__all__ = ["EngineService", "ServiceSettings"]
