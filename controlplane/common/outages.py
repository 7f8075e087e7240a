"""What a call fails on while the database or Redis is away, for the loops that wait such an
outage out and log it as one (engine/redis_outage.py's OutageLog) rather than a traceback at
each retry. Other errors (an IntegrityError, a bug) are not outages and are told in full."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

from engine.redis_outage import TRANSPORT_ERRORS

DATA_OUTAGE_ERRORS = (OperationalError, InterfaceError, *TRANSPORT_ERRORS)
