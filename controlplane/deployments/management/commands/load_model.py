"""``manage.py load_model PATH --name NAME``: validate a checkpoint and register it."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import shell_actor
from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.deployments.services import ModelRegistrationError, served_model_register


class Command(BaseCommand):
    help = (
        "Validate a checkpoint and register (or update) it as a served model: a Hugging Face "
        "safetensors directory (completions only when it has no chat template), a "
        "sentence-transformers directory (embeddings), or a .gguf file (converted once)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "path",
            help="checkpoint directory (config.json, *.safetensors, tokenizer), "
            "sentence-transformers directory, or .gguf file (or a directory holding one)",
        )
        parser.add_argument("--name", required=True, help="the model name clients will use")
        parser.add_argument(
            "--quantization",
            choices=["int8", "int4"],
            default=None,
            help="serve the weights weight-only quantized (CPU engines): int8 per channel, or "
            "int4 in groups of 32 (a Q4_1 GGUF keeps its own 4-bit values)",
        )

    def handle(self, *args, **opts):
        def progress(message: str) -> None:
            self.stdout.write(f"  {message}")
            self.stdout.flush()

        warn_if_no_running_platform(self, change_not_announced("The model"))
        self.stdout.write(f"Validating {opts['path']}")
        try:
            model = served_model_register(
                path=opts["path"],
                name=opts["name"],
                progress=progress,
                quantization=opts["quantization"] or "",
                actor_label=shell_actor("load_model"),
            )
        except ModelRegistrationError as exc:
            raise CommandError(f"not registered: {exc}") from exc
        serves = (
            "rerank and score (cross-encoder)"
            if model.is_cross_encoder
            else "embeddings"
            if model.is_embedding
            else "completions only (no chat template)"
            if model.completions_only
            else "chat and completions"
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"Registered {model.name!r}: {model.architecture}, "
                f"{model.num_parameters / 1e6:.1f}M parameters, {model.dtype}"
                f"{', weights ' + model.quantization if model.quantization else ''}, "
                f"context {model.max_model_len}, {serves}"
            )
        )
        if model.reasoning_parser:
            self.stdout.write(
                f"Reasoning parser {model.reasoning_parser!r} (from the chat template): the "
                "thinking is returned apart from the answer (reasoning_content / reasoning)"
            )
        self.stdout.write(f"Start an engine with: python manage.py run_engine --model {model.name}")
