"""The database: SQLite under var/ by default, anything dj-database-url reads from DATABASE_URL."""

import dj_database_url

from controlplane.settings.core import VAR_DIR
from controlplane.settings.env import env

_default_sqlite = f"sqlite:///{VAR_DIR / 'db.sqlite3'}"

DATABASES = {
    "default": dj_database_url.parse(
        env.str("DATABASE_URL", _default_sqlite),
        conn_max_age=60,
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (Daphne, Celery, management commands) share the file: wait on locks
    # instead of failing at once.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
    # A transaction takes the write lock when it begins, waiting up to the timeout. A deferred
    # one (SQLite's default) that reads first and then writes fails at once with "database is
    # locked" when another process is writing (SQLite will not wait on a lock upgrade): node
    # agents and management commands writing the fleet's tables at once hit exactly that.
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
    DATABASES["default"]["CONN_MAX_AGE"] = 0
