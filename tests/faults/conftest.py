"""Real processes for fault tests: the platform of tests/inference (Redis, database, an engine,
Daphne), started again for this package. Fresh Daphne processes beside it are in
tests/support/fresh_daphne.py, manage.py as an operator runs it in tests/support/operator_commands.py.
"""

from tests.inference.conftest import (  # noqa: F401 (fixtures: this package gets its own platform)
    api_platform,
    api_server,
    auth,
    platform,
    platform_env,
    pooling_engine,
)
