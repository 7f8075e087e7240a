"""`manage.py register_adapter PATH --name NAME --base MODEL [--tenant T ...]`.

Registers an adapter directory through the same service the admin uses, then validates it
right here (the command is not an API process) unless ``--queue`` leaves that to Celery.
Registering a name again updates that adapter: the new files are validated, and the engines
load them in place of the old ones.
"""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from controlplane.adapters import services
from controlplane.adapters.models import Adapter
from controlplane.adapters.selectors import adapter_get
from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.tenants.selectors import tenant_get


class Command(BaseCommand):
    help = "Register a PEFT LoRA adapter directory for a served base model."

    def add_arguments(self, parser):
        parser.add_argument(
            "path", help="directory with adapter_config.json and adapter_model.safetensors"
        )
        parser.add_argument("--name", required=True, help="the name clients pass as model=")
        parser.add_argument("--base", required=True, help="the served base model's name")
        parser.add_argument(
            "--tenant", action="append", default=[], help="grant to this tenant (repeatable)"
        )
        parser.add_argument(
            "--queue", action="store_true", help="leave validation to the Celery worker"
        )

    def handle(self, *args, **options):
        tenants = []
        for name in options["tenant"]:
            tenant = tenant_get(name_or_slug=name)
            if tenant is None:
                raise CommandError(f"unknown tenant {name!r}")
            tenants.append(tenant)
        warn_if_no_running_platform(
            self,
            "the validation job is queued where no platform's Celery worker may look."
            if options["queue"]
            else change_not_announced("The adapter"),
        )
        existed = adapter_get(name=options["name"]) is not None
        try:
            adapter = services.adapter_register(
                path=options["path"],
                name=options["name"],
                base=options["base"],
                tenants=tenants,
                actor_label="manage.py register_adapter",
                enqueue=options["queue"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        verb = "updated" if existed else "registered"
        if options["queue"]:
            self.stdout.write(f"{verb} {adapter.name}; validation queued")
            return
        if existed:
            self.stdout.write(f"updated {adapter.name} to the files in {adapter.path}")
        adapter = services.adapter_validate(adapter_id=adapter.pk)
        if adapter.state != Adapter.State.READY:
            raise CommandError(
                f"adapter {adapter.name} failed validation: {adapter.failure_reason}"
            )
        granted = ", ".join(t.slug for t in tenants) or "no tenant yet"
        self.stdout.write(
            f"adapter {adapter.name} is ready on {adapter.base_model.name} "
            f"(rank {adapter.rank}, {', '.join(adapter.target_modules)}; granted to {granted})"
        )
