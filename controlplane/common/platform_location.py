"""Where the running platform's Redis is, so commands typed in a second shell reach it.

``manage.py serve`` starts a private Redis on a free port. A revocation typed in another shell
must bump the auth epoch in *that* Redis, not in whatever listens on 6379, or API processes
keep accepting the key until their cache expires. So serve records its Redis URL and its pid
in ``VAR_DIR/run/redis.json`` (mode 0600: the URL may hold a password) and removes the file on
exit; a record whose process is gone (serve was killed) is ignored. Settings read the record
when REDIS_URL is unset. Nothing here imports Django at module level: settings import it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from controlplane.common.private_files import write_private_file


@dataclass(frozen=True)
class RunningPlatform:
    redis_url: str
    pid: int
    # When the process started (Linux clock ticks since boot): a pid reused by another
    # process after serve was killed does not count as serve.
    pid_started: str | None = None


def location_file(var_dir: str | Path) -> Path:
    return Path(var_dir) / "run" / "redis.json"


def _process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime); fields are counted after the command name, which may hold spaces.
    return stat.rsplit(")", 1)[1].split()[19]


def _is_alive(platform: RunningPlatform) -> bool:
    try:
        os.kill(platform.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    started = _process_start_time(platform.pid)
    return platform.pid_started is None or started is None or started == platform.pid_started


def record_running_platform(var_dir: str | Path, *, redis_url: str, pid: int | None = None) -> Path:
    """Write the record for the serve process ``pid`` (default: this one); returns its path."""
    pid = os.getpid() if pid is None else pid
    record = RunningPlatform(redis_url=redis_url, pid=pid, pid_started=_process_start_time(pid))
    path = location_file(var_dir)
    write_private_file(path, json.dumps(asdict(record)) + "\n")
    return path


def find_running_platform(var_dir: str | Path) -> RunningPlatform | None:
    """The platform serve runs from ``var_dir``, or None (no record, unreadable, or stale)."""
    try:
        platform = RunningPlatform(**json.loads(location_file(var_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return platform if _is_alive(platform) else None


def forget_running_platform(var_dir: str | Path) -> None:
    """Remove the record if it is this process's (a second serve must not remove the first's)."""
    path = location_file(var_dir)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def point_settings_at_redis(url: str) -> None:
    """Make this process's Redis clients use ``url`` from now on.

    serve read its settings before it started its Redis; clients read ``settings.REDIS_URL``
    on use, and the cache and Celery follow when they were derived from it.
    """
    from asgiref.local import Local
    from django.conf import settings
    from django.core.cache import caches

    previous = settings.REDIS_URL
    settings.REDIS_URL = url
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        if getattr(settings, name, None) == previous:
            setattr(settings, name, url)
    cache = settings.CACHES["default"]
    if cache.get("LOCATION") == previous:
        cache["LOCATION"] = url
        caches._connections = Local(caches.thread_critical)  # new clients read LOCATION


def running_platform_found() -> bool:
    """False when Redis fell back to the default: REDIS_URL unset and no live serve recorded."""
    from django.conf import settings

    fell_back = getattr(settings, "REDIS_URL_SOURCE", "environment") == "default"
    return not fell_back or settings.REDIS_URL != settings.DEFAULT_REDIS_URL


def change_not_announced(change: str) -> str:
    """The consequence, for a change to keys, tenants, models or grants, of reaching no platform."""
    return (
        f"{change} is stored in the database, but running API processes notice it only when "
        "their caches expire (within a minute)."
    )


def warn_if_no_running_platform(command, consequence: str) -> None:
    """One warning line on ``command``'s stderr when no running platform was found."""
    if running_platform_found():
        return
    from django.conf import settings

    command.stderr.write(
        f"warning: no running platform found (REDIS_URL is unset and no live `manage.py serve` "
        f"is recorded in {location_file(settings.VAR_DIR)}; using {settings.REDIS_URL}): "
        f"{consequence} Set REDIS_URL to reach a platform that serve did not start.",
        style_func=command.style.WARNING,
    )
