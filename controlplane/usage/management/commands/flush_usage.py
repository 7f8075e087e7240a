"""manage.py flush_usage [--every SECONDS]: drain queued usage now, or keep doing so."""

import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.common.platform_location import warn_if_no_running_platform
from controlplane.usage.services import usage_flush


class Command(BaseCommand):
    help = "Write usage events queued in Redis into the database (once, or every N seconds)."

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=0.0, help="repeat every N seconds")

    def handle(self, *args, every: float, **options):
        warn_if_no_running_platform(
            self, "usage events wait in the running platform's Redis, not in this one."
        )
        while True:
            try:
                written = usage_flush()
            except redis.ConnectionError as exc:
                raise CommandError(f"cannot reach Redis at {settings.REDIS_URL}: {exc}") from exc
            self.stdout.write(f"wrote {written} usage records")
            if every <= 0:
                return
            time.sleep(every)
