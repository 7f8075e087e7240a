"""Settings, split by concern; every value a deployment changes comes from the environment.

Production differs from development only by environment variables (see docs/operations.md).
"""

from controlplane.settings.api import *  # noqa: F403
from controlplane.settings.batches import *  # noqa: F403
from controlplane.settings.core import *  # noqa: F403
from controlplane.settings.database import *  # noqa: F403
from controlplane.settings.logging import *  # noqa: F403
from controlplane.settings.login_lockout import *  # noqa: F403
from controlplane.settings.metrics import *  # noqa: F403
from controlplane.settings.portal import *  # noqa: F403
from controlplane.settings.security import *  # noqa: F403
from controlplane.settings.services import *  # noqa: F403
