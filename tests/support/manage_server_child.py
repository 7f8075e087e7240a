"""The process behind tests/support/manage_server.py: management commands, one per line of
stdin (a JSON list of arguments), each answered by one JSON line on the original stdout with
its exit status and what it wrote to stdout and stderr.

While a command runs, file descriptors 1 and 2 point at files of their own, so output written
by the command's subprocesses is captured too, as ``capture_output`` would."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray output between commands must not reach the replies' pipe
    import django

    django.setup()
    for line in sys.stdin:
        returncode, stdout, stderr = run(json.loads(line))
        replies.write(json.dumps({"returncode": returncode, "stdout": stdout, "stderr": stderr}))
        replies.write("\n")
        replies.flush()


def run(args: list[str]) -> tuple[int, str, str]:
    from django.core.management import ManagementUtility
    from django.db import connections

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        returncode = 0
        try:
            forget_cached_state()
            ManagementUtility(["manage.py", *args]).execute()
        except SystemExit as exit:
            returncode = (
                exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
            )
        except BaseException:  # what an uncaught exception does to `python manage.py`
            traceback.print_exc()
            returncode = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            # The next command, like a new process, opens its own connections: it sees what
            # other processes wrote meanwhile.
            connections.close_all()
        out.seek(0)
        err.seek(0)
        return returncode, out.read(), err.read()


def forget_cached_state() -> None:
    """Per-process caches a fresh manage.py would start without."""
    from controlplane.access.keycache import key_cache
    from controlplane.catalog.cache import catalog_cache

    key_cache.invalidate_local()
    catalog_cache.invalidate_local()


if __name__ == "__main__":
    main()
