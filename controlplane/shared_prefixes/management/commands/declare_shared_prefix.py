"""manage.py declare_shared_prefix NAME (--system-file F | --messages-file F | --text-file F)
[--tools-file F] [--model NAME ...] [--inactive]: a new version of a shared prefix."""

import json
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.shared_prefixes.models import SharedPrefix
from controlplane.shared_prefixes.services import shared_prefix_create


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc}") from exc


def _read_json(path: str):
    try:
        return json.loads(_read(path))
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path} is not JSON: {exc}") from exc


class Command(BaseCommand):
    help = (
        "Declare a shared prefix (its next version): a system prompt, chat messages and tools, "
        "or prompt text whose KV cache every tenant may reuse."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        content = parser.add_mutually_exclusive_group(required=True)
        content.add_argument("--system-file", help="a system prompt (one system message)")
        content.add_argument("--messages-file", help='JSON: [{"role": ..., "content": ...}]')
        content.add_argument("--text-file", help="prompt text, as /v1/completions sends it")
        parser.add_argument("--tools-file", help="JSON: the tools list, as requests send it")
        parser.add_argument(
            "--model",
            action="append",
            default=[],
            help="apply to this model (repeatable; none: every served model)",
        )
        parser.add_argument("--description", default="")
        parser.add_argument("--inactive", action="store_true", help="declare it switched off")

    def handle(self, *args, name, model, description, inactive, **options):
        warn_if_no_running_platform(self, change_not_announced("The shared prefix"))
        content: dict = {"kind": SharedPrefix.Kind.CHAT}
        if options["text_file"]:
            content = {"kind": SharedPrefix.Kind.TEXT, "text": _read(options["text_file"])}
        elif options["system_file"]:
            content["messages"] = [{"role": "system", "content": _read(options["system_file"])}]
        else:
            content["messages"] = _read_json(options["messages_file"])
        if options["tools_file"]:
            content["tools"] = _read_json(options["tools_file"])
        try:
            prefix = shared_prefix_create(
                name=name,
                model_names=model,
                description=description,
                is_active=not inactive,
                actor_label="manage.py",
                **content,
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(
            f"declared shared prefix {prefix} ({'inactive' if inactive else 'active'})"
        )
