"""manage.py flush_usage [--every SECONDS]: drain queued usage now, or keep doing so."""

import time

from django.core.management.base import BaseCommand

from controlplane.usage.services import usage_flush


class Command(BaseCommand):
    help = "Write usage events queued in Redis into the database (once, or every N seconds)."

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=0.0, help="repeat every N seconds")

    def handle(self, *args, every: float, **options):
        while True:
            written = usage_flush()
            self.stdout.write(f"wrote {written} usage records")
            if every <= 0:
                return
            time.sleep(every)
